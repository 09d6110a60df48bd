"""Shared fixtures: a tiny CLIP and a fake dataset in the real split_zhou layout."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from signal_guard import pytest_sessionstart  # noqa: F401  (SIGINT/SIGTERM stop the session)
from toy_fixtures import toy_splits, toy_test_backbone, toy_test_checkpoint, toy_transforms  # noqa: F401

# Nothing in the tests may reach the network (W&B, Hugging Face).
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")

TINY = "fedbench-tiny-vit"


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.gpu` tests need CUDA: without it they are skipped with a reason `-ra` prints,
    never silently passed (`pytest -m gpu`; scripts/gpu_check.sh runs them on a GPU machine)."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU: torch.cuda.is_available() is False here; run `pytest -m gpu` "
        "(or scripts/gpu_check.sh) on a GPU machine"
    )
    for item in gpu_tests:
        item.add_marker(skip)


def write_split_zhou(root: Path, num_classes: int = 12, train_per_class: int = 6, test_per_class: int = 3) -> Path:
    """A DTD-shaped dataset: dtd/images/<class>/*.jpg + split_zhou_DescribableTextures.json.
    Each class's images are a distinct colour with noise, so a model can learn them."""
    from PIL import Image

    folder = root / "dtd"
    rng = np.random.default_rng(0)
    splits: dict[str, list] = {"train": [], "val": [], "test": []}
    for label in range(num_classes):
        cname = f"texture_{chr(ord('a') + label)}"
        (folder / "images" / cname).mkdir(parents=True, exist_ok=True)
        colour = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256])
        for split, count in (("train", train_per_class), ("test", test_per_class)):
            for k in range(count):
                rel = f"{cname}/{split}_{k}.png"
                pixels = np.clip(colour + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / "images" / rel)
                splits[split].append([rel, label, cname])
    (folder / "split_zhou_DescribableTextures.json").write_text(json.dumps(splits))
    return root


@pytest.fixture(scope="session")
def fake_data_root(tmp_path_factory) -> Path:
    return write_split_zhou(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def tiny_backbone():
    from benchmark.backbone import load_backbone

    return load_backbone(TINY, None)


def tiny_config(fake_data_root: Path, tmp_path: Path, **overrides):
    from benchmark.config import build_config

    base = dict(
        dataset="dtd",
        backbone=TINY,
        pretrained="none",
        data_root=str(fake_data_root),
        out=str(tmp_path / "runs"),
        shots=4,
        rounds=2,
        local_epochs=1,
        clients=3,
        batch_size=8,
        seed=1,
        wandb="disabled",
    )
    base.update(overrides)
    method_args = base.pop("method_args", {})
    return build_config(base, {"method_args": method_args})


def toy_run_config(tmp_path: Path, method: str, method_args: dict | None = None, **overrides):
    """A short run on the toy world with the test toy CLIP (2 rounds, 4 clients, 4 shots)."""
    from benchmark.config import build_config

    base = dict(
        method=method,
        dataset="toy",
        backbone="fedbench-toy-vit",
        pretrained="fedbench-toy-test",
        clients=4,
        shots=4,
        rounds=2,
        local_epochs=1,
        batch_size=8,
        seed=3,
        wandb="disabled",
        checkpoint_every=0,
        out=str(tmp_path / "runs"),
    )
    return build_config({**base, **overrides}, {"method_args": dict(method_args or {})})


# What a built-in method needs beyond its defaults on the tiny CLIP (4 blocks per tower).
TINY_METHOD_ARGS = {"fedmaple": {"depth": 3}}


def method_config(method: str, fake_data_root: Path, tmp_path: Path, **overrides):
    """`tiny_config` for a built-in `method`: with the arguments the tiny CLIP needs, and
    class attributes written for the methods that read them (FedMVP)."""
    from benchmark.registry import available_methods

    extra = {"method_args": TINY_METHOD_ARGS.get(method, {})}
    if available_methods()[method].uses_class_attributes:
        folder = tmp_path / "attributes"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "dtd.json").write_text(
            json.dumps({f"texture {chr(ord('a') + i)}": [f"colour {i}", f"pattern {i}"] for i in range(12)})
        )
        extra["attributes"] = str(folder)
    return tiny_config(fake_data_root, tmp_path, method=method, **{**extra, **overrides})


def trained_built_in_methods() -> list[str]:
    """The built-in methods that train (other test modules register plugins of their own)."""
    from benchmark.registry import available_methods

    return sorted(
        name
        for name, cls in available_methods().items()
        if cls.__module__.startswith("methods.") and name != "zeroshot"
    )


def write_mini_preset(
    folder: Path,
    data_root: Path,
    methods=("zeroshot", "promptfl"),
    seeds=(1,),
    rounds=1,
    paper_table: str | None = None,
) -> Path:
    """The smallest table a test can reproduce: base2novel on the fake DTD layout, tiny CLIP."""
    preset = folder / "mini.yaml"
    preset.write_text(
        "title: Mini table\n"
        + (f"paper_table: {paper_table}\n" if paper_table else "")
        + f"run: {{protocol: base2novel, shots: 2, rounds: {rounds}, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {data_root}, wandb: disabled}}\n"
        "datasets: [dtd]\n"
        f"methods: [{', '.join(methods)}]\n"
        f"seeds: [{', '.join(map(str, seeds))}]\n"
    )
    return preset


class Done:
    """What a CLI call returned and printed."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def isolated_registry(request):
    """`isolated_registry(registry)`: that `benchmark.plugins.Registry` discovers again in this
    test (the built-ins already imported stay registered), and whatever the test registers
    or records is forgotten after it; restored in place, so names bound to its dicts
    (`benchmark.registry.PLUGIN_ERRORS`) stay true."""

    def isolate(registry):
        saved = {a: dict(getattr(registry, a)) for a in ("members", "origins", "packages", "errors")}
        loaded = registry.loaded

        def restore():
            for attribute, content in saved.items():
                getattr(registry, attribute).clear()
                getattr(registry, attribute).update(content)
            registry.loaded = loaded

        request.addfinalizer(restore)
        registry.errors.clear()
        registry.loaded = False
        return registry

    return isolate


@pytest.fixture
def fedbench(capsys):
    """The CLI, run in this process (the console script itself is checked in test_spine)."""
    from benchmark.cli import main

    def call(*args) -> Done:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return call


def tiny_run_args(data_root: Path, out: Path, *extra, method: str = "promptfl") -> list[str]:
    """`fedbench run` arguments for `method` on the tiny CLIP and the fake DTD (2 shots,
    batch 8, no W&B), then `extra`."""
    return [
        "run", "--method", method, "--dataset", "dtd", "--backbone", TINY, "--pretrained", "none",
        "--data-root", str(data_root), "--out", str(out), "--shots", "2", "--batch-size", "8",
        "--wandb", "disabled", *map(str, extra),
    ]  # fmt: skip


def run_tiny_cell(fedbench, method: str, data_root: Path, out: Path, *flags) -> dict:
    """`tiny_run_args` with 2 rounds and 2 clients run in this process; its summary.json,
    after checking it exited 0."""
    done = fedbench(*tiny_run_args(data_root, out, "--rounds", 2, "--clients", 2, *flags, method=method))
    assert done.returncode == 0, done.stderr
    return json.loads(next(Path(out).rglob("summary.json")).read_text())


def client_metrics_with(accuracy, protocol, client, partition, dataset) -> dict[str, float]:
    """`protocol`'s metrics of `client` with its requests scored by `accuracy(indices, class_ids)`
    (a recorder, a table) instead of an evaluator."""
    wanted = protocol.requests(client, partition, dataset)
    return protocol.metrics_from(
        {n: accuracy(r.indices, r.class_ids) for n, r in wanted.items()}, client, partition, dataset
    )


def assert_guide_shows_example(guide: Path, example: Path) -> None:
    """A guide includes its runnable example verbatim, between BEGIN/END markers that name the
    example's path (the runnable-docs test runs the file, so the guide shows what was run)."""
    name = f"docs/examples/{example.name}"
    found = re.search(
        rf"<!-- BEGIN {re.escape(name)} -->\n```python\n(.*?)```\n<!-- END {re.escape(name)} -->",
        guide.read_text(),
        re.S,
    )
    assert found, f"{guide.name} must include {name} between its BEGIN/END markers"
    assert found.group(1) == example.read_text()
