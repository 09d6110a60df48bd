"""Methods from a file, without packaging: --method path.py:Class and FEDBENCH_PLUGINS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

from benchmark import registry

PLUGIN = '''\
from benchmark.method import FederatedMethod


class FrozenAgain(FederatedMethod):
    """Zero-shot CLIP under another name."""

    frozen_image_features = True

    def __init__(self, backbone, temperature: float = 1.0) -> None:
        super().__init__(backbone)
'''


@pytest.fixture
def plugin_file(tmp_path, monkeypatch, isolated_registry):
    # Load the registry before isolating it: a load inside the test would register the
    # built-ins into what is forgotten after it, leaving later tests no methods.
    registry.available_methods()
    isolated_registry(registry.METHODS).loaded = True
    monkeypatch.setattr(registry, "_FILES", {})
    path = tmp_path / "my_plugin.py"
    path.write_text(PLUGIN)
    return path


def test_run_a_method_from_a_file_path(plugin_file, fedbench, fake_data_root, tmp_path):
    done = fedbench(
        "run",
        "--method",
        f"{plugin_file}:FrozenAgain",
        "--dataset",
        "dtd",
        "--backbone",
        TINY,
        "--pretrained",
        "none",
        "--data-root",
        fake_data_root,
        "--out",
        tmp_path / "runs",
        "--shots",
        "2",
        "--rounds",
        "1",
        "--clients",
        "3",
        "--wandb",
        "disabled",
        "--temperature",
        "2",
    )
    assert done.returncode == 0, done.stderr
    (run,) = (tmp_path / "runs").glob("frozen_again_dtd_*")
    config = (run / "config.yaml").read_text()
    assert "method: frozen_again" in config and "temperature: 2.0" in config and f"file {plugin_file}" in config
    assert registry.method_origin("frozen_again") == f"file {plugin_file}"


def test_a_missing_file_or_class_is_a_clear_error(plugin_file, fedbench, tmp_path):
    done = fedbench("run", "--method", str(tmp_path / "nope.py:X"), "--print-config")
    assert done.returncode == 2 and "method file" in done.stderr and "does not exist" in done.stderr
    done = fedbench("run", "--method", f"{plugin_file}:Nope", "--print-config")
    assert done.returncode == 2 and "has no FederatedMethod subclass 'Nope'" in done.stderr


def test_describe_a_method_from_a_file(plugin_file, fedbench):
    # `fedbench methods --describe path.py:Class` was a KeyError traceback (exit 1): the
    # origin was looked up under the spec, not under the name the file registers.
    done = fedbench("methods", "--describe", f"{plugin_file}:FrozenAgain", "--backbone", TINY, "--temperature", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("frozen_again: Zero-shot CLIP under another name.")
    assert f"from file {plugin_file})" in done.stdout
    assert "--temperature float = 1.0" in done.stdout and "with temperature = 2.0" in done.stdout
    missing = fedbench("methods", "--describe", f"{plugin_file.parent / 'nope.py'}:X")
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_fedbench_plugins_registers_file_methods(plugin_file, tmp_path):
    env = {**os.environ, "FEDBENCH_PLUGINS": f"{plugin_file}:FrozenAgain"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmark.cli", "methods"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    line = next(out for out in done.stdout.splitlines() if out.startswith("frozen_again"))
    assert "Zero-shot CLIP under another name." in line and f"[file {plugin_file}]" in line


def test_new_method_outside_the_repo_writes_a_package_with_an_entry_point(fedbench, tmp_path, monkeypatch):
    import tomllib

    monkeypatch.chdir(tmp_path)
    done = fedbench("new-method", "my_adapter")
    assert done.returncode == 0, done.stderr
    package = tmp_path / "fedbench-my_adapter"
    pyproject = tomllib.loads((package / "pyproject.toml").read_text())
    assert pyproject["project"]["entry-points"]["fedbench.methods"] == {"my_adapter": "fedbench_my_adapter.method"}
    # PyPI's "fedbench" is an unrelated project: the skeleton must never make pip fetch it
    assert pyproject["project"]["dependencies"] == []
    assert "pip install -e /path/to/fedbench" in (package / "pyproject.toml").read_text()
    assert "pip install -e /path/to/fedbench" in done.stdout
    module = package / "fedbench_my_adapter" / "method.py"
    assert '@register_method("my_adapter")' in module.read_text()
    assert f"fedbench run --method {module}:MyAdapter" in done.stdout
    assert not (tmp_path / "methods").exists()

    taken = fedbench("new-method", "promptfl")
    assert taken.returncode == 2 and "method name 'promptfl' is taken (registered by fedbench)" in taken.stderr
    assert not (tmp_path / "fedbench-promptfl").exists()


MISSPELLED_UPLOAD = '''\
from methods.promptfl import PromptFL


class SharedTypo(PromptFL):
    """PromptFL whose upload pattern names no state key: nothing would be federated."""

    upload_keys = ("shraed.*",)
'''


def test_upload_keys_that_match_no_state_key_stop_the_run_before_training(
    plugin_file, fedbench, fake_data_root, tmp_path
):
    path = tmp_path / "shared_typo.py"
    path.write_text(MISSPELLED_UPLOAD)
    done = fedbench(
        "run", "--method", f"{path}:SharedTypo", "--dataset", "dtd", "--backbone", TINY, "--pretrained", "none",
        "--data-root", fake_data_root, "--out", tmp_path / "runs", "--shots", "2", "--rounds", "1",
        "--clients", "2", "--batch-size", "8", "--wandb", "disabled",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "upload_keys ('shraed.*',) match none of its state keys (ctx)" in done.stderr
    assert "Traceback" not in done.stderr and "round 1" not in done.stdout
    assert not list((tmp_path / "runs").glob("*/summary.json"))  # nothing ran
