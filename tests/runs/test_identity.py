"""A cell's identity: a changed default, method source or setting is a new cell; --force reruns."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import yaml
from conftest import tiny_config
from conftest import write_mini_preset as write_preset

from benchmark.cli import main
from benchmark.runs.identity import cell_hash, cell_identity


def reproduce(tmp: Path, preset: Path, *extra: str) -> int:
    return main(["reproduce", str(preset), "--out", str(tmp / "runs"), "--results", str(tmp / "results"), *extra])


def test_a_changed_default_hyperparameter_makes_the_cell_missing(tmp_path, fake_data_root, capsys, monkeypatch):
    from methods.promptfl import PromptFL

    preset = write_preset(tmp_path, fake_data_root)
    assert reproduce(tmp_path, preset) == 0
    capsys.readouterr()
    assert reproduce(tmp_path, preset, "--dry-run") == 0
    assert "2 cells: 2 done, 0 to run" in capsys.readouterr().out

    # The same source file, only the default lr differs (as if the author edited it).
    defaults = PromptFL.__init__.__defaults__
    names = list(PromptFL.__init__.__code__.co_varnames[2 : 2 + len(defaults)])
    changed = tuple(0.5 if name == "lr" else value for name, value in zip(names, defaults))
    monkeypatch.setattr(PromptFL.__init__, "__defaults__", changed)
    assert reproduce(tmp_path, preset, "--dry-run") == 0
    assert "2 cells: 1 done, 1 to run" in capsys.readouterr().out  # zeroshot still done, promptfl not


def test_force_reruns_finished_cells(tmp_path, fake_data_root, capsys):
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot",))
    assert reproduce(tmp_path, preset) == 0
    (run,) = (tmp_path / "runs").glob("zeroshot_*")
    before = (run / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    assert reproduce(tmp_path, preset) == 0
    assert "ran 0 runs, 1 were already done" in capsys.readouterr().out
    assert reproduce(tmp_path, preset, "--force") == 0
    assert "ran 1 runs, 0 were already done" in capsys.readouterr().out
    assert (run / "summary.json").stat().st_mtime_ns != before
    assert [p.name for p in (tmp_path / "runs").glob("zeroshot_*")] == [run.name]  # replaced, not duplicated


def test_config_yaml_holds_every_hyperparameter_and_reads_back_to_the_same_cell(tmp_path, fake_data_root, fedbench):
    from benchmark.registry import get_method, hyperparameters

    out = tmp_path / "runs"
    done = fedbench(
        "run",
        "--method",
        "promptfl",
        "--dataset",
        "dtd",
        "--backbone",
        "fedbench-tiny-vit",
        "--pretrained",
        "none",
        "--data-root",
        fake_data_root,
        "--out",
        out,
        "--shots",
        "2",
        "--rounds",
        "1",
        "--clients",
        "3",
        "--local-epochs",
        "1",
        "--wandb",
        "disabled",
        "--lr",
        "0.01",
    )
    assert done.returncode == 0, done.stderr
    (run,) = out.glob("promptfl_*")
    saved = yaml.safe_load((run / "config.yaml").read_text())
    expected = {h.name: h.default for h in hyperparameters(get_method("promptfl"))} | {"lr": 0.01}
    assert saved["method_args"] == expected
    identity = saved["identity"]
    assert identity["method"]["class"] == "methods.promptfl.PromptFL" and len(identity["method"]["source_sha256"]) == 16
    config_file = Path(__file__).resolve().parents[2] / "benchmark" / "model_configs" / "fedbench-tiny-vit.json"
    config_sha = hashlib.sha256(config_file.read_bytes()).hexdigest()[:16]
    assert identity["weights"] == f"fedbench-tiny-vit(config sha256:{config_sha})@random(seed 0)"
    assert [d["dataset"] for d in identity["data"]] == ["dtd"] and identity["hash"] == run.name.rsplit("_", 1)[1]
    environment = json.loads((run / "environment.json").read_text())
    assert environment["method_package"].startswith("fedbench==") and isinstance(environment["plugin_packages"], dict)

    # The file is a valid --config: the same cell, so the run lands in the same folder.
    again = fedbench("run", "--config", run / "config.yaml", "--data-root", fake_data_root, "--out", out)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in out.glob("promptfl_*")] == [run.name]


def test_editing_a_methods_source_changes_its_cells(tmp_path, fake_data_root):
    from benchmark.registry import METHODS
    from benchmark.runs.identity import forget_sources

    source = tmp_path / "edited_method.py"
    source.write_text(
        "from benchmark.method import FederatedMethod\n"
        "from benchmark.registry import register_method\n\n"
        "@register_method('edited_method')\n"
        "class Edited(FederatedMethod):\n"
        "    '''Frozen CLIP.'''\n"
        "    frozen_image_features = True\n"
    )
    spec = importlib.util.spec_from_file_location("edited_method", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules["edited_method"] = module
    try:
        spec.loader.exec_module(module)
        config = tiny_config(fake_data_root, tmp_path, method="edited_method")
        before = cell_hash(config)
        source.write_text(source.read_text() + "    # a comment and a docstring edit keep the cell\n")
        source.write_text(source.read_text().replace("Frozen CLIP.", "Frozen CLIP, plain zero-shot."))
        forget_sources()  # as the next process: it reads the file again
        assert cell_hash(config) == before
        source.write_text(source.read_text() + "    uses_class_attributes = False\n")
        assert cell_hash(config) == before  # this process still runs the code it loaded
        forget_sources()
        assert cell_hash(config) != before
        assert cell_hash(tiny_config(fake_data_root, tmp_path, method="edited_method", seed=2)) != cell_hash(config)
    finally:
        METHODS.remove("edited_method")
        sys.modules.pop("edited_method", None)


def test_weights_and_data_are_part_of_the_identity(tmp_path, fake_data_root):
    checkpoint = tmp_path / "weights.pt"
    checkpoint.write_bytes(b"first")
    first = tiny_config(fake_data_root, tmp_path, pretrained=str(checkpoint))
    h1 = cell_hash(first)
    checkpoint.write_bytes(b"second weights")
    assert cell_hash(first) != h1  # same path, other weights
    toy = tiny_config(fake_data_root, tmp_path, backbone="fedbench-toy-vit", pretrained="fedbench-toy")
    from data.toy.pretrain import DEFAULT_RECIPE

    assert DEFAULT_RECIPE.hash in cell_identity(toy)["weights"]  # the recipe, and the bytes once built
    assert cell_identity(toy)["data"] != cell_identity(tiny_config(fake_data_root, tmp_path, dataset="toy"))["data"]


def test_suite_weights_are_named_by_their_bytes_once_built(tmp_path, fake_data_root):
    """The toy CLIP's float rounding depends on the machine that pretrained it: two builds
    of one recipe are different weights, so they must be different cells."""
    from benchmark.backbone_weights import (
        PRETRAINED_CACHED,
        PRETRAINED_IDENTITIES,
        PRETRAINED_PROVIDERS,
        register_pretrained,
    )
    from benchmark.runs.identity import prepare_weights

    checkpoint = tmp_path / "suite-weights.pt"

    def build() -> Path:
        checkpoint.write_bytes(b"weights of one build")
        return checkpoint

    register_pretrained(
        "test-suite-weights", identity=lambda: "recipe-1", cached=lambda: checkpoint if checkpoint.is_file() else None
    )(build)
    try:
        config = tiny_config(fake_data_root, tmp_path, pretrained="test-suite-weights")
        assert cell_identity(config)["weights"].endswith("recipe-1 (not built yet)")
        assert prepare_weights("test-suite-weights") is True
        built = cell_hash(config)
        assert "sha256:" in cell_identity(config)["weights"]
        assert prepare_weights("test-suite-weights") is False  # cached: nothing built, same names
        assert cell_hash(config) == built
        checkpoint.write_bytes(b"weights of another machine's build")  # same recipe, other bytes
        assert cell_hash(config) != built
    finally:
        for registry in (PRETRAINED_PROVIDERS, PRETRAINED_IDENTITIES, PRETRAINED_CACHED):
            registry.pop("test-suite-weights", None)


def test_a_change_to_the_shared_code_makes_every_cell_new(tmp_path, fake_data_root, monkeypatch):
    import benchmark.runs.identity as identity

    shared = tmp_path / "shared_code_for_test.py"
    shared.write_text('def scale(x):\n    """Doubles x."""\n    return 2 * x  # the factor\n')
    spec = importlib.util.spec_from_file_location("shared_code_for_test", shared)
    monkeypatch.setitem(sys.modules, "shared_code_for_test", importlib.util.module_from_spec(spec))
    monkeypatch.setattr(identity, "FRAMEWORK_ROOTS", ("shared_code_for_test",))  # a module outside the project
    identity.forget_sources()
    config = tiny_config(fake_data_root, tmp_path)
    before = cell_identity(config)["framework"]
    shared.write_text('def scale(x):\n    """Returns twice x."""\n\n    return 2 * x\n')
    identity.forget_sources()  # as the next process
    assert cell_identity(config)["framework"] == before  # docstring, comment and layout only
    shared.write_text("def scale(x):\n    return 3 * x\n")
    assert cell_identity(config)["framework"] == before  # a running process keeps the names of the code it runs
    identity.forget_sources()
    assert cell_identity(config)["framework"] != before
    identity.forget_sources()


def test_the_framework_roots_are_modules_of_the_project():
    from benchmark.runs.identity import FRAMEWORK_ROOTS, ROOT, _module_file

    assert [m for m in FRAMEWORK_ROOTS if not (_module_file(m) and _module_file(m).is_relative_to(ROOT))] == []


def test_an_untracked_method_file_makes_the_checkout_dirty(tmp_path):
    """Issue 38: a run of a new, untracked methods/NAME.py recorded git_dirty: false. An
    untracked file where the code lives counts; one elsewhere (runs/, notes) does not."""
    import subprocess

    from benchmark.runs.results import code_version

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "methods").mkdir()
    (tmp_path / "methods" / "promptfl.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one method")
    assert code_version(tmp_path)["git_dirty"] is False
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "notes.txt").write_text("not code\n")
    assert code_version(tmp_path)["git_dirty"] is False
    (tmp_path / "methods" / "half_prompt.py").write_text("y = 2\n")
    assert code_version(tmp_path)["git_dirty"] is True


def test_a_method_whose_module_is_no_longer_imported_still_has_an_identity(tmp_path, fake_data_root):
    # A module made at run time, or taken out of sys.modules after its class registered,
    # has no file to hash: the identity names the class without its source, never a crash.
    import types

    from benchmark.registry import METHODS, register_method
    from methods.zeroshot import ZeroShotCLIP

    module = types.ModuleType("made_at_run_time")
    cls = type("MadeAtRunTime", (ZeroShotCLIP,), {"__module__": module.__name__})
    register_method("made_at_run_time")(cls)
    try:
        config = tiny_config(fake_data_root, tmp_path, method="made_at_run_time")
        assert "made_at_run_time" not in sys.modules
        assert cell_hash(config) == cell_hash(config)
        assert cell_identity(config)["method"]["class"].endswith("MadeAtRunTime")
    finally:
        METHODS.remove("made_at_run_time")
