"""Every shell command of README.md and docs/ that is marked runnable works as typed.

The convention: an HTML comment `<!-- runnable -->` on the line before a ```bash block;
`<!-- runnable with FEDBENCH_PLUGINS=docs/examples/x.py -->` runs it with that file of the
checkout as a plugin (what the guide tells the reader to do first), and likewise
`FEDBENCH_DATASETS=` (a dataset plugin) and `FEDBENCH_PROTOCOLS=`. Each line of such a block is one command (a trailing `\\` continues it; `#` starts a
comment, as in bash), run from a fresh folder in order, so later commands see what earlier
ones wrote (runs/, run.yaml). `fedbench` is this checkout's CLI, and `python
docs/examples/x.py ...` runs that example of the checkout with this interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- runnable -->"
PLUGIN_VARIABLES = ("FEDBENCH_PLUGINS", "FEDBENCH_DATASETS", "FEDBENCH_PROTOCOLS")
MARKER_PATTERN = rf"^<!-- runnable(?: with ((?:{'|'.join(PLUGIN_VARIABLES)})=\S+))? -->$"
EXAMPLE_COMMAND = "python docs/examples/"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def runnable_blocks() -> list[tuple[str, list[str] | None]]:
    """(file:line, commands) of every marker alone on its line; commands None when no bash
    block follows it on the next line. A marker naming plugins puts `where` as
    'file:line with VARIABLE=path'."""
    blocks = []
    for path in DOCS:
        text = path.read_text()
        for found in re.finditer(MARKER_PATTERN, text, re.M):
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, found.start()) + 1}"
            if found.group(1):
                where += f" with {found.group(1)}"
            block = re.match(r"\n```bash\n(.*?)\n```", text[found.end() :], re.S)
            blocks.append((where, commands(block.group(1)) if block else None))
    return blocks


def plugins_of(where: str) -> dict[str, str]:
    """The plugin variables a block runs with (every one of PLUGIN_VARIABLES, empty unless
    its marker names files): the named files, in the checkout."""
    variable, _, named = where.partition(" with ")[2].partition("=")
    found = dict.fromkeys(PLUGIN_VARIABLES, "")
    if named:
        found[variable] = ",".join(str(ROOT / name) for name in named.split(","))
    return found


def commands(block: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_runnable_blocks_are_marked_and_call_fedbench():
    blocks = runnable_blocks()
    assert len(blocks) >= 3, "README.md, docs/index.md and docs/running.md mark their toy commands runnable"
    guide = [where for where, _ in blocks if where.startswith("docs/writing-a-method.md")]
    assert len(guide) == 3, "the guide's describe, run and reproduce commands run as typed"
    for where, _ in blocks:
        for plugin in filter(None, ",".join(plugins_of(where).values()).split(",")):
            assert Path(plugin).is_file(), f"{where}: no file {plugin}"
    for where, block in blocks:
        assert block is not None, f"{where}: {MARKER} must be followed on the next line by a ```bash block"
        assert block, f"{where}: an empty runnable block"
        for command in block:
            assert command.startswith("fedbench ") or (
                command.startswith(EXAMPLE_COMMAND) and (ROOT / command.split()[1]).is_file()
            ), f"{where}: {command!r} is neither a fedbench command nor an example of docs/examples/ run by python"


@pytest.mark.slow
@pytest.mark.parametrize("where, block", runnable_blocks(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_runnable_command_exits_0(where, block, tmp_path):
    assert block, f"{where}: no commands (see test_the_runnable_blocks_are_marked_and_call_fedbench)"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "WANDB_MODE": "disabled",  # what a command passes wins; nothing may reach the network
        "WANDB_DIR": str(tmp_path / "wandb"),
        "FEDBENCH_DATA": str(tmp_path / "data"),
        **plugins_of(where),
    }
    shim = f'fedbench() {{ "{sys.executable}" -m benchmark.cli "$@"; }}\n'
    for command in block:
        if command.startswith(EXAMPLE_COMMAND):
            command = f'"{sys.executable}" {ROOT}/{command.removeprefix("python ")}'
        done = subprocess.run(
            ["bash", "-c", shim + command], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, f"{where}: `{command}` exited {done.returncode}:\n{done.stderr[-3000:]}"
