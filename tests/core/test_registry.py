"""The plugin author's experience: the guide's example method, third-party entry points
(good and broken), `fedbench new-method` and `fedbench methods --describe`."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from conftest import TINY, assert_guide_shows_example, tiny_config
from torch import nn

from benchmark import plugins, registry
from benchmark.method import FederatedMethod
from benchmark.method_contract import CORE
from benchmark.optim import sgd_with_cosine
from benchmark.runs.runner import run_experiment

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-method.md"
EXAMPLE = ROOT / "docs" / "examples" / "half_prompt.py"
TINY_TEXT_WIDTH = 64


@pytest.fixture
def fresh_registry(monkeypatch, isolated_registry):
    """A registry that loads again (built-ins already imported stay registered), with the
    given fake entry points; everything it registers is forgotten after the test."""
    registry.available_methods()
    isolated_registry(registry.METHODS)

    def with_entry_points(*eps):
        monkeypatch.setattr(plugins, "entry_points", lambda group: list(eps) if group == "fedbench.methods" else [])

    with_entry_points()
    return with_entry_points


def import_file(path: Path, module_name: str, monkeypatch) -> types.ModuleType:
    """Execute a method file as module `module_name` (registering its methods)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, module_name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def half_prompt(fresh_registry, monkeypatch):
    registry.available_methods()
    return import_file(EXAMPLE, "half_prompt_example", monkeypatch)


# -- the guide ------------------------------------------------------------------------------


def test_the_guide_shows_exactly_the_tested_example():
    assert_guide_shows_example(GUIDE, EXAMPLE)
    guide = GUIDE.read_text()
    assert 30 <= len(EXAMPLE.read_text().splitlines()) <= 70
    # What the guide asks of every method, the example does: an Args: section, an lr_schedule.
    assert '        """Args:\n        n_ctx: ' in EXAMPLE.read_text() and "    lr_schedule = " in EXAMPLE.read_text()
    for command in (
        "fedbench run --method half_prompt",
        "fedbench reproduce toy --methods half_prompt",
        '[project.entry-points."fedbench.methods"]',
        "fedbench new-method",
    ):
        assert command in guide


def test_half_prompt_uploads_its_shared_half_and_keeps_the_other(half_prompt, fake_data_root, tmp_path, tiny_backbone):
    n_ctx, n_shared, clients, rounds = 6, 2, 3, 2
    args = {"n_ctx": n_ctx, "n_shared": n_shared, "lr": 0.1}
    method = registry.build_method("half_prompt", tiny_backbone, args)
    assert set(method.client_state()) == {"shared_ctx", "personal_ctx"}
    assert set(method.uploaded_state()) == {"shared_ctx"}
    assert method.uploaded_state()["shared_ctx"].shape == (n_shared, TINY_TEXT_WIDTH)

    config = tiny_config(
        fake_data_root, tmp_path, method="half_prompt", method_args=args, clients=clients, rounds=rounds, shots=2
    )
    result = run_experiment(config, write=False, progress=False)
    states = result.federation.client_states
    assert len(states) == clients
    shared = [s["shared_ctx"] for s in states.values()]
    personal = [s["personal_ctx"] for s in states.values()]
    assert all(torch.equal(shared[0], s) for s in shared[1:])  # the FedAvg'd half reached everyone
    for i in range(clients):
        for j in range(i + 1, clients):
            assert not torch.allclose(personal[i], personal[j])  # each client trained its own half
    assert result.summary["uploaded_params"] == n_shared * TINY_TEXT_WIDTH
    assert result.summary["trainable_params"] == n_ctx * TINY_TEXT_WIDTH
    assert result.summary["bytes_up_per_round"] == [n_shared * TINY_TEXT_WIDTH * 4 * clients] * rounds


def test_half_prompt_hyperparameters_are_flags_and_are_checked(half_prompt, fedbench, fake_data_root, tmp_path):
    out = tmp_path / "runs"
    done = fedbench(
        "run",
        "--method",
        "half_prompt",
        "--dataset",
        "dtd",
        "--backbone",
        TINY,
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
        "--local-epochs",
        "1",
        "--clients",
        "2",
        "--n-ctx",
        "4",
        "--n-shared",
        "3",
        "--wandb",
        "disabled",
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = [p.parent for p in out.glob("*/summary.json")]
    config = (run_dir / "config.yaml").read_text()
    assert "n_shared: 3" in config and "n_ctx: 4" in config
    bad = fedbench(
        "run", "--method", "half_prompt", "--backbone", TINY, "--pretrained", "none", "--n-shared", "4", "--n-ctx", "4"
    )
    assert bad.returncode == 2 and "method 'half_prompt': n_shared must be between 1 and n_ctx - 1 = 3" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_describe_shows_hyperparameters_state_counts_and_hooks(half_prompt, fedbench):
    done = fedbench("methods", "--describe", "half_prompt", "--backbone", TINY)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "--n-shared int = 8" in out and "--lr float = 0.002" in out
    assert f"{16 * TINY_TEXT_WIDTH:,} trainable parameters, {8 * TINY_TEXT_WIDTH:,} uploaded" in out
    assert "uploaded state (upload_keys = ('shared_ctx',)): shared_ctx" in out
    assert "personal state: personal_ctx" in out
    overridden = {line.split()[1] for line in out.splitlines() if line.startswith("  * ")}
    assert overridden == {"encode_classes", "configure_optimizers"}
    assert re.search(r"^ {4}encode_images +default: the frozen CLIP image feature", out, re.M)
    assert re.search(r"^ {4}aggregate +default: FedAvg", out, re.M)
    assert "frozen_image_features = True" in out


def test_describe_pfedmma_counts_on_vit_b16(fedbench):
    # A built-in method: its absence (or an import error) is a failure, never a skip.
    assert "pfedmma" in registry.available_methods()
    done = fedbench("methods", "--describe", "pfedmma", "--backbone", "ViT-B-16")
    assert done.returncode == 0, done.stderr
    assert "674,560 trainable parameters, 8,448 uploaded" in done.stdout


# -- third-party plugins (in process, fake entry points) ------------------------------------


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    load: Callable[[], Any]
    package: str = "fedbench-fake-plugins"

    @property
    def dist(self):
        return types.SimpleNamespace(name=self.package)


class ClassPlugin(FederatedMethod):
    """A plugin class without @register_method: registered under its entry point's name."""

    upload_keys = ("w",)

    def __init__(self, backbone, lr: float = 0.1) -> None:
        super().__init__(backbone)
        self.w = nn.Parameter(torch.zeros(3))

    def configure_optimizers(self):
        return sgd_with_cosine(self, [self.w], 0.1)


class NoOptimizer(FederatedMethod):
    """Trains a parameter but never says how."""

    def __init__(self, backbone) -> None:
        super().__init__(backbone)
        self.w = nn.Parameter(torch.zeros(3))


class NoDefault(FederatedMethod):
    def __init__(self, backbone, rank: int) -> None:
        super().__init__(backbone)


def module_registering(*names: str) -> Callable[[], types.ModuleType]:
    """A fake plugin module whose import registers `names` in order (and may fail midway)."""

    def load():
        module = types.ModuleType("fake_plugin_module")
        for name in names:
            cls = type(f"M_{name}", (FederatedMethod,), {"__module__": module.__name__})
            registry.register_method(name)(cls)
        return module

    return load


def raising(exc: Exception) -> Callable[[], Any]:
    def load():
        raise exc

    return load


def test_broken_plugins_are_reported_by_name_and_package_and_the_rest_still_work(fresh_registry, fedbench):
    fresh_registry(
        FakeEntryPoint("boom", "boompkg.method", raising(ImportError("No module named 'scipy2'")), "boompkg"),
        FakeEntryPoint("not_a_method", "nampkg:Thing", lambda: type("Thing", (), {}), "nampkg"),
        FakeEntryPoint("dupe", "dupepkg.m", module_registering("dupe_first", "promptfl"), "dupepkg"),
        FakeEntryPoint("no_default", "ndpkg:NoDefault", lambda: NoDefault, "ndpkg"),
        FakeEntryPoint("empty", "emptypkg.m", module_registering(), "emptypkg"),
        FakeEntryPoint("class_plugin", "goodpkg:ClassPlugin", lambda: ClassPlugin, "goodpkg"),
        FakeEntryPoint("lazy", "lazypkg:NoOptimizer", lambda: NoOptimizer, "lazypkg"),
    )
    done = fedbench("methods")
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0]: line for line in done.stdout.splitlines() if not line.startswith("(")}
    assert {"zeroshot", "promptfl", "class_plugin", "lazy"} <= set(listed)
    assert "[plugin 'class_plugin' (package goodpkg)]" in listed["class_plugin"]
    assert "[plugin" not in listed["promptfl"] and registry.method_origin("promptfl") == "fedbench"  # not the dupe
    assert "dupe_first" not in listed  # a failed plugin's partial registrations are undone
    failures = [line for line in done.stdout.splitlines() if line.startswith("(plugin")]
    expected = {
        "boom": ("boompkg.method, package boompkg", "ImportError: No module named 'scipy2'"),
        "not_a_method": ("nampkg:Thing, package nampkg", "is not a subclass of benchmark.FederatedMethod"),
        "dupe": ("dupepkg.m, package dupepkg", "'promptfl' from plugin 'dupe' (package dupepkg) is already registered"),
        "no_default": ("ndpkg:NoDefault, package ndpkg", "hyperparameter 'rank' needs a default"),
        "empty": ("emptypkg.m, package emptypkg", "registered no method"),
    }
    assert len(failures) == len(expected)
    for name, (where, why) in expected.items():
        (line,) = [f for f in failures if f.startswith(f"(plugin '{name}' ")]
        assert f"({where}) failed to load" in line and why in line, line
    assert registry.get_method("class_plugin") is ClassPlugin and ClassPlugin.name == "class_plugin"

    unknown = fedbench("run", "--method", "boom", "--backbone", TINY, "--pretrained", "none")
    assert unknown.returncode == 2 and "unknown method 'boom'" in unknown.stderr
    assert "plugin 'boom' (boompkg.method, package boompkg): ImportError" in unknown.stderr

    lazy = fedbench("methods", "--describe", "lazy", "--backbone", TINY)
    assert lazy.returncode == 2 and "Traceback" not in lazy.stderr
    assert "method 'lazy' from plugin 'lazy' (package lazypkg) has trainable parameters (w)" in lazy.stderr
    assert "configure_optimizers" in lazy.stderr


def test_a_plugin_class_already_registered_by_its_module_is_not_registered_twice(fresh_registry):
    def load():
        module_registering("by_decorator")()
        return registry.METHODS.members["by_decorator"]

    fresh_registry(FakeEntryPoint("other_name", "pkg.m:Cls", load))
    methods = registry.available_methods()
    assert "by_decorator" in methods and "other_name" not in methods and not registry.PLUGIN_ERRORS


def test_each_plugin_method_is_credited_to_the_entry_point_that_names_it(fresh_registry):
    """The class entry point loads first and imports the module that the other entry point
    names: each method is still credited to its own entry point."""
    module = types.ModuleType("shared_plugin_module")

    def load_module():
        if not hasattr(module, "Decorated"):
            module.Decorated = registry.register_method("by_module")(
                type("Decorated", (ClassPlugin,), {"__module__": module.__name__})
            )
        return module

    def load_class():
        load_module()
        return type("Sub", (module.Decorated,), {"__module__": "shared_plugin_classes"})

    fresh_registry(
        FakeEntryPoint("by_class", "pkg.m:Sub", load_class, "pkg"),
        FakeEntryPoint("by_module", "pkg.m", load_module, "pkg"),
    )
    assert {"by_class", "by_module"} <= set(registry.available_methods()) and not registry.PLUGIN_ERRORS
    assert registry.method_origin("by_class") == "plugin 'by_class' (package pkg)"
    assert registry.method_origin("by_module") == "plugin 'by_module' (package pkg)"


# -- fedbench new-method --------------------------------------------------------------------


def test_new_method_writes_a_documented_skeleton_that_runs(
    fedbench, fresh_registry, fake_data_root, tmp_path, monkeypatch
):
    import inspect

    done = fedbench("new-method", "my_prompt", "--out", tmp_path / "methods")
    assert done.returncode == 0, done.stderr
    path = tmp_path / "methods" / "my_prompt.py"
    text = path.read_text()
    core = [m.name for m in CORE if m.kind == "hook"]
    for hook in registry.HOOKS:
        doc = inspect.getdoc(getattr(FederatedMethod, hook))
        assert "Runs " in doc and "Returns" in doc and "Default:" in doc  # when, what, default
        if hook in core:  # defined, with the contract's docstring
            assert f"    def {hook}(" in text
            assert textwrap.indent(f'"""{doc}"""', " " * 8) in text
        else:  # an optional hook: shown as a comment to uncomment, not an override
            assert f"    # def {hook}(" in text and f"    def {hook}(" not in text
    for attribute in registry.CLASS_ATTRIBUTES:
        assert re.search(rf"^    (# )?{attribute} = ", text, re.M)
    assert "@@" not in text

    registry.available_methods()
    module = import_file(path, "my_prompt_skeleton", monkeypatch)
    assert registry.get_method("my_prompt") is module.MyPrompt
    assert registry.overridden_hooks(module.MyPrompt) == core  # --describe: only what the file defines
    config = tiny_config(fake_data_root, tmp_path, method="my_prompt", rounds=1, clients=2, shots=2)
    result = run_experiment(config, write=False, progress=False)
    assert result.summary["uploaded_params"] == 16 * TINY_TEXT_WIDTH
    assert set(result.summary["metrics"]) >= {"Local", "Base", "Novel", "HM"}


def test_new_method_refuses_to_overwrite_and_checks_the_name(fedbench, tmp_path):
    existing = tmp_path / "taken.py"
    existing.write_text("# mine\n")
    again = fedbench("new-method", "taken", "--out", tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr and str(existing) in again.stderr
    assert existing.read_text() == "# mine\n"
    for bad in ("2fast", "my-method", "class", "a b"):
        done = fedbench("new-method", bad, "--out", tmp_path)
        assert done.returncode == 2 and "Python identifier" in done.stderr, bad
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.py"]


# -- a real installed package ---------------------------------------------------------------


PLUGIN_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fedbench-smoke-plugin"
version = "0.0.1"

[project.entry-points."fedbench.methods"]
smoke_prompt = "fedbench_smoke_plugin.prompt"
smoke_class = "fedbench_smoke_plugin.classy:SmokeClassPrompt"

[tool.setuptools]
packages = ["fedbench_smoke_plugin"]
"""

PLUGIN_CLASS = """\
from fedbench_smoke_plugin.prompt import HalfPrompt


class SmokeClassPrompt(HalfPrompt):
    \"\"\"The example with a smaller default split, registered through its entry point.\"\"\"
"""


@pytest.mark.slow
def test_an_installed_plugin_package_is_listed_and_runs(fake_data_root, tmp_path):
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("setuptools is needed to install the plugin package offline")
    package = tmp_path / "plugin"
    (package / "fedbench_smoke_plugin").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PLUGIN_PYPROJECT)
    (package / "fedbench_smoke_plugin" / "__init__.py").write_text("")
    (package / "fedbench_smoke_plugin" / "prompt.py").write_text(
        EXAMPLE.read_text().replace('register_method("half_prompt")', 'register_method("smoke_prompt")')
    )
    (package / "fedbench_smoke_plugin" / "classy.py").write_text(PLUGIN_CLASS)
    exe = shutil.which("fedbench", path=str(Path(sys.executable).parent))
    # Installed into a folder of its own, put on the path of the processes below only: the
    # project's environment is never changed (its entry points are found there as in site-packages).
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir"]
        + ["-q", "--target", str(site), str(package)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    paths = [str(site), str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    assert install.returncode == 0, install.stderr
    listed = subprocess.run([exe, "methods"], capture_output=True, text=True, timeout=600, env=env)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    assert "[plugin 'smoke_prompt' (package fedbench-smoke-plugin)]" in lines["smoke_prompt"]
    assert "[plugin 'smoke_class' (package fedbench-smoke-plugin)]" in lines["smoke_class"]
    assert "promptfl" in lines and "zeroshot" in lines
    assert "failed to load" not in listed.stdout

    out = tmp_path / "runs"
    run = subprocess.run(
        [
            exe,
            "run",
            "--method",
            "smoke_class",
            "--backbone",
            TINY,
            "--pretrained",
            "none",
            "--dataset",
            "dtd",
            "--data-root",
            str(fake_data_root),
            "--out",
            str(out),
            "--shots",
            "2",
            "--rounds",
            "1",
            "--clients",
            "2",
            "--local-epochs",
            "1",
            "--n-shared",
            "2",
            "--wandb",
            "disabled",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert "| smoke_class" in run.stdout
    (run_dir,) = [p.parent for p in out.glob("*/summary.json")]
    import json

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["uploaded_params"] == 2 * TINY_TEXT_WIDTH
    assert "n_shared: 2" in (run_dir / "config.yaml").read_text()


def test_a_hyperparameter_named_like_a_run_option_is_rejected_at_registration(fresh_registry, fedbench):
    class ShadowedBeta(FederatedMethod):
        """Its `beta` would be silently taken by the Dirichlet --beta."""

        def __init__(self, backbone, beta: float = 0.9) -> None:
            super().__init__(backbone)

    with pytest.raises(
        registry.MethodError, match=r"hyperparameter 'beta' has the name of a run option \(--beta\); rename it"
    ):
        registry.register_method("shadowed_beta")(ShadowedBeta)
    assert "shadowed_beta" not in registry.available_methods()


def test_new_method_next_hint_is_a_command_that_works(fedbench, tmp_path):
    """Issue 60, item 8: the `next:` line of `new-method --out DIR` describes the new method
    (it used to say `fedbench methods --describe NAME`, which answered `unknown method`)."""
    import shlex

    done = fedbench("new-method", "hinted_prompt", "--out", tmp_path / "mine")
    assert done.returncode == 0, done.stderr
    (hint,) = [line for line in done.stdout.splitlines() if line.startswith("next:")]
    command = shlex.split(hint.split("`")[1])
    assert command[0] == f"FEDBENCH_PLUGINS={tmp_path / 'mine' / 'hinted_prompt.py'}" and command[1] == "fedbench"
    variable, value = command[0].split("=", 1)
    env = {**os.environ, variable: value}
    described = subprocess.run(
        [sys.executable, "-m", "benchmark.cli", *command[2:]], capture_output=True, text=True, env=env, timeout=600
    )
    assert described.returncode == 0, described.stderr
    assert described.stdout.startswith("hinted_prompt: ")


def test_an_unknown_method_names_the_plugin_forms_and_the_close_name():
    with pytest.raises(registry.MethodError) as raised:
        registry.get_method("pfedma")
    message = str(raised.value)
    assert "unknown method 'pfedma' (did you mean 'pfedmma'?)" in message
    assert "FEDBENCH_PLUGINS=path/to/my_method.py" in message and "--method path/to/my_method.py" in message
