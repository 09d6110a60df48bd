"""methods/hyperparameters.json: the built-in methods' hyperparameters as their classes say,
which the command line checks values against before torch loads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark import hyperparameters as manifest
from benchmark.cli.args import method_hyperparameters
from benchmark.errors import SetupWarning
from benchmark.hyperparameters import MethodError, check_values
from benchmark.registry import builtin_methods, hyperparameters, stale_manifest


def check_method_args(name: str, values: dict) -> dict:  # as `fedbench run` checks its flags
    return check_values(name, method_hyperparameters(name), values)


def test_the_manifest_says_what_the_classes_say():
    stale = "methods/hyperparameters.json is out of date: run `python scripts/write_method_manifest.py`"
    assert stale_manifest() == [], stale
    for name, cls in builtin_methods().items():
        assert manifest.builtin_hyperparameters(name) == hyperparameters(cls), f"{name}: {stale}"


def test_a_stale_manifest_is_not_used_and_says_so(monkeypatch, tmp_path):
    """After a method's source changes, the classes are read instead: a range loosened in
    the source but not in the manifest must not refuse a value the method now takes; and
    a warning says why the command line got slow and what to run."""
    stored = json.loads(manifest.MANIFEST.read_text())
    lr = next(r for r in stored["methods"]["promptfl"] if r["name"] == "lr")
    lr["range"] = {"gt": 1.0}  # a manifest that would refuse lr 0.5
    stale = tmp_path / "hyperparameters.json"
    stale.write_text(json.dumps({**stored, "sources": {**stored["sources"], "methods/promptfl.py": "0" * 64}}))
    monkeypatch.setattr(manifest, "MANIFEST", stale)
    with pytest.warns(SetupWarning, match=r"out of date \(methods/promptfl.py changed since it was written\)"):
        assert manifest.builtin_hyperparameters("promptfl") is None
    with pytest.warns(SetupWarning, match="python scripts/write_method_manifest.py"):
        assert check_method_args("promptfl", {"lr": 0.5}) == {"lr": 0.5}
    assert stale_manifest() == [
        "methods/promptfl.py changed",
        "method promptfl's hyperparameters differ from its class's",
    ]
    # With current digests the (edited) manifest is what is checked against.
    stale.write_text(json.dumps(stored))
    with pytest.raises(MethodError, match="'lr' must be > 1"):
        check_method_args("promptfl", {"lr": 0.5})


def test_a_new_method_file_keeps_the_command_line_fast_and_the_manifest_check_green(tmp_path, monkeypatch, fedbench):
    """Issue 38: after `fedbench new-method`, `fedbench run --round 2` took 16.5 s (the new
    file made the manifest stale, so every method was read from its class, importing torch)
    and `make test` failed. In a copy of the checkout with a new methods/half_prompt.py: the
    typo is refused without importing torch, and the manifest check finds nothing to fix."""
    root = Path(manifest.ROOT)
    tracked = subprocess.run(
        ["git", "ls-files", "benchmark", "methods", "data"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        if name.endswith((".py", ".json", ".tmpl", ".yaml", ".csv")):
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    assert fedbench("new-method", "half_prompt").returncode == 0
    assert (tmp_path / "methods" / "half_prompt.py").is_file()
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    typo = (
        "import sys, time\n"
        "start = time.perf_counter()\n"
        "from benchmark.cli import main\n"
        "code = main(['run', '--round', '2'])\n"
        "print(code, 'torch' in sys.modules, round(time.perf_counter() - start, 2))\n"
    )
    done = subprocess.run([sys.executable, "-c", typo], cwd=tmp_path, env=env, capture_output=True, text=True)
    code, torch_loaded, seconds = done.stdout.split()
    assert (code, torch_loaded) == ("2", "False"), done.stderr
    assert "--round: did you mean --rounds?" in done.stderr and "warning" not in done.stderr
    print(f"`fedbench run --round 2` beside a new method file: refused in {seconds} s")
    check = "from benchmark.registry import available_methods, stale_manifest\nprint(sorted(available_methods()).count('half_prompt'), stale_manifest())"
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.stdout.split("\n")[0] == "1 []", done.stderr


def test_methods_outside_the_manifest_are_read_from_their_classes(tmp_path):
    plugin = tmp_path / "scaled.py"
    plugin.write_text(
        "from benchmark.method import FederatedMethod, Range\n"
        "class Scaled(FederatedMethod):\n"
        "    ranges = {'scale': Range(gt=0)}\n"
        "    def __init__(self, backbone, scale: float = 1.0):\n"
        "        super().__init__(backbone)\n"
    )
    (h,) = method_hyperparameters(f"{plugin}:Scaled")
    assert (h.name, h.type, h.default, str(h.range)) == ("scale", float, 1.0, "> 0")
    with pytest.raises(MethodError, match="'scale' must be > 0"):
        check_method_args("scaled", {"scale": 0})
