"""Commands that only list or describe load no torch (issue 60, item 10): `--help` of every
subcommand, and `presets`, `methods`, `datasets` from the first call on a fresh clone with an
empty cache (the registering modules imported with inert third-party packages:
benchmark/cli/inert.py), or, with a plugin file named by FEDBENCH_PLUGINS, once their listing
is memoized. Structural: what a fresh process imported, not how long it took."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

HEAVY = ("torch", "lightning", "torch._dynamo", "scipy", "open_clip", "pandas")


def imported_after(calls: list[list[str]], env: dict[str, str]) -> tuple[list[str], str]:
    """The heavy modules a fresh process holds after `main(argv)` for each argv, and what it printed."""
    script = textwrap.dedent(
        f"""
        import sys
        from benchmark.cli import main
        for argv in {calls!r}:
            try:
                main(argv)
            except SystemExit:
                pass
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    *printed, imported = done.stdout.splitlines()
    return eval(imported), "\n".join(printed)  # a list of names, as the script printed it


def test_the_help_of_every_subcommand_imports_no_torch(tmp_path):
    import argparse

    from benchmark.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    commands = sorted(action.choices)
    assert {"presets", "methods", "datasets", "run", "reproduce", "tune", "runs", "new-method"} <= set(commands)
    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache")}
    imported, printed = imported_after([["--help"]] + [[name, "--help"] for name in commands], env)
    assert imported == []
    assert printed.count("usage: fedbench") == len(commands) + 1


def test_a_command_parsed_alone_is_parsed_as_by_the_whole_parser(capsys):
    """`main` builds only the subcommand it is given (its module named after it): the same
    help and the same parsed options as the whole parser gives; other names get the whole."""
    import argparse

    from benchmark.cli import build_parser

    whole = build_parser()
    action = next(a for a in whole._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in action.choices.items():
        alone = build_parser(name)
        chosen = next(a for a in alone._actions if isinstance(a, argparse._SubParsersAction)).choices
        assert name in chosen and (len(chosen) <= 2 or name == "data"), name
        assert chosen[name].format_help() == command.format_help(), name
    for name in ("nope", "--help", "data"):
        chosen = next(a for a in build_parser(name)._actions if isinstance(a, argparse._SubParsersAction)).choices
        assert set(chosen) == set(action.choices), name


def test_the_listings_import_no_torch_from_the_first_call_with_an_empty_cache(tmp_path):
    """Issue 60, acceptance: a fresh clone's first `fedbench presets` took 10-20 s (torch,
    Lightning and scipy imported to fill the memo)."""
    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache"), "FEDBENCH_PLUGINS": "", "FEDBENCH_DATASETS": ""}
    imported, printed = imported_after([["presets"], ["methods"], ["datasets", "--data-root", str(tmp_path)]], env)
    assert imported == []
    lines = printed.splitlines()
    assert any(line.split()[:3] == ["toy_generalization", "105", "cells"] for line in lines)
    assert any(line.split()[:1] == ["pfedmma"] for line in lines)
    assert any(line.split()[:2] == ["toy", "base2novel"] for line in lines)
    assert not (tmp_path / "cache").exists()  # nothing memoized: the first call is as fast as any


def test_the_inert_listings_are_the_registries_own(tmp_path):
    """What a listing reads with inert packages is what the registries hold when imported
    for real: names, summaries, origins, folders, cell counts. Both in fresh processes: this
    one holds the methods other tests registered."""
    entries = "[f(**kw) for f in (listing._method_entries, listing._dataset_entries, listing._preset_rows)]"
    inert_script = (
        "import json\nfrom benchmark.cli import inert, listing\n"
        "print(json.dumps([inert.call_inert(f) for f in (listing._method_entries, listing._dataset_entries, listing._preset_rows)]))"
    )
    real_script = (
        f"import json, torch\nfrom benchmark.cli import listing\nkw = dict(check=False)\nprint(json.dumps({entries}))"
    )
    env = {**os.environ, "FEDBENCH_PLUGINS": "", "FEDBENCH_DATASETS": ""}
    answers = []
    for script in (inert_script, real_script):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    inert_answer, real_answer = answers
    assert inert_answer == real_answer
    assert {"pfedmma", "promptfl", "lora"} <= set(inert_answer[0])  # the built-ins, not an empty pair


def test_a_plugin_file_is_listed_without_torch_until_it_changes(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(
        textwrap.dedent(
            '''
            from benchmark.registry import register_method
            from methods.promptfl import PromptFL


            @register_method("mine_listed")
            class Mine(PromptFL):
                """My method, first version."""
            '''
        )
    )
    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache"), "FEDBENCH_PLUGINS": str(plugin)}
    first = subprocess.run(
        [sys.executable, "-m", "benchmark.cli", "methods"], capture_output=True, text=True, env=env, timeout=600
    )
    assert first.returncode == 0, first.stderr
    assert "My method, first version." in first.stdout
    imported, printed = imported_after([["methods"]], env)
    assert imported == []
    assert printed == first.stdout.rstrip("\n")
    plugin.write_text(plugin.read_text().replace("first version", "second version"))
    imported, printed = imported_after([["methods"]], env)
    assert "torch" in imported  # the edited file is read again
    assert "My method, second version." in printed
