"""Commands that only list or describe load no torch (issue 60, item 10): `--help` of every
subcommand, and `presets`, `methods`, `datasets` once their listing is memoized (a plugin
file named by FEDBENCH_PLUGINS included). Structural: what a fresh process imported, not how
long it took."""

from __future__ import annotations

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


def test_presets_lists_without_torch_from_the_second_call(tmp_path):
    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache"), "FEDBENCH_PLUGINS": "", "FEDBENCH_DATASETS": ""}
    first = subprocess.run(
        [sys.executable, "-m", "benchmark.cli", "presets"], capture_output=True, text=True, env=env, timeout=600
    )
    assert first.returncode == 0, first.stderr
    assert any(line.split()[:3] == ["toy_generalization", "105", "cells"] for line in first.stdout.splitlines())
    imported, printed = imported_after([["presets"]], env)
    assert imported == []
    assert printed == first.stdout.rstrip("\n")


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
