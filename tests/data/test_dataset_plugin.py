"""A dataset is a plugin as a method and a protocol are: the guide's example
(docs/writing-a-dataset.md), written into a temporary package and named by
FEDBENCH_DATASETS, is listed by `fedbench datasets` and runs through `fedbench run`; a
broken dataset plugin is reported by name while the others still load."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY, assert_guide_shows_example

from data import catalog
from data.registry import DATASETS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "tiles_dataset.py"
GUIDE = ROOT / "docs" / "writing-a-dataset.md"


@pytest.fixture
def tiles(tmp_path, monkeypatch, isolated_registry):
    """The example as module `my_datasets.tiles` under tmp_path, named by FEDBENCH_DATASETS,
    its images written under a data root; returns that data root."""
    catalog.all_datasets()  # the built-ins, before the registry is isolated
    package = tmp_path / "site" / "my_datasets"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tiles.py").write_text(EXAMPLE.read_text())
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setenv("FEDBENCH_DATASETS", "my_datasets.tiles")
    isolated_registry(DATASETS)
    monkeypatch.delitem(sys.modules, "my_datasets.tiles", raising=False)
    catalog.all_datasets()  # discovers the plugin: credited to FEDBENCH_DATASETS' module
    yield sys.modules["my_datasets.tiles"].make_images(tmp_path / "data").parent
    sys.modules.pop("my_datasets.tiles", None)
    sys.modules.pop("my_datasets", None)


def test_the_guide_shows_exactly_the_tested_example():
    assert_guide_shows_example(GUIDE, EXAMPLE)


def test_a_dataset_plugin_is_listed_and_runs(tiles, fedbench, tmp_path):
    info = catalog.dataset_info("tiles")
    assert DATASETS.origins["tiles"] == "module my_datasets.tiles" and not DATASETS.errors
    assert (info.folder, info.num_classes) == ("tiles", 4)

    listed = fedbench("datasets", "--data-root", tiles)
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.split()[:1] == ["tiles"])
    assert row[:6] == ["tiles", "dirichlet", "found", "4", "32", "16"], listed.stdout
    assert "tiles: module my_datasets.tiles" in listed.stdout

    out = tmp_path / "runs"
    done = fedbench(
        "run", "--dataset", "tiles", "--protocol", "dirichlet", "--clients", 2, "--shots", 2, "--rounds", 1,
        "--batch-size", 4, "--backbone", TINY, "--pretrained", "none", "--data-root", tiles, "--out", out,
        "--wandb", "disabled",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = next(out.glob("promptfl_tiles_dirichlet_*"))
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary["metrics"]) == {"Acc"} and 0 <= summary["metrics"]["Acc"] <= 100
    # The plugin's file is the dataset's code: hashed into the cell's identity.
    identity = yaml.safe_load((folder / "config.yaml").read_text())["identity"]
    assert [d["dataset"] for d in identity["data"]] == ["tiles"] and identity["data"][0]["loader_sha256"]


def test_a_missing_folder_says_the_layout_and_how_to_get_it(tiles, fedbench, tmp_path):
    done = fedbench("datasets", "--data-root", tmp_path)  # no tiles/ here
    assert done.returncode == 0, done.stderr
    assert re.search(r"^\s*tiles\s+dirichlet\s+missing", done.stdout, re.M), done.stdout
    from data.base import DatasetError

    with pytest.raises(DatasetError, match=r"tiles/\{train,test\}/<class name>.*python tiles_dataset.py DATA_ROOT"):
        catalog.require_dataset("tiles", tmp_path)
    # `fedbench data download` knows no steps of its own for a plugin: it says the plugin's.
    steps = fedbench("data", "download", "tiles", "--data-root", tmp_path)
    assert steps.returncode == 1 and "1. Write it with `python tiles_dataset.py DATA_ROOT`" in steps.stdout


def test_a_broken_dataset_plugin_is_reported_and_the_others_load(tmp_path, monkeypatch, isolated_registry, fedbench):
    catalog.all_datasets()
    broken = tmp_path / "broken_dataset.py"
    broken.write_text(
        "from data.registry import register_dataset\n\n"
        "@register_dataset('dtd', folder='x', layout='x', how_to_get='x')\n"  # a taken name
        "def load(folder, transforms):\n    raise AssertionError\n"
    )
    monkeypatch.setenv("FEDBENCH_DATASETS", str(broken))
    isolated_registry(DATASETS)
    datasets = catalog.all_datasets()
    assert "dtd" in datasets and datasets["dtd"].loader.__module__ == "data.loaders.coop"
    (label, why), *_ = DATASETS.errors.items()
    assert str(broken) in label and "'dtd'" in why and "already registered by fedbench" in why
    with pytest.raises(Exception, match=r"(?s)unknown dataset 'nope'.*Plugins that failed to load"):
        catalog.dataset_info("nope")
    listed = fedbench("datasets", "--data-root", tmp_path)
    assert "dataset plugins that failed to load:" in listed.stdout and "already registered" in listed.stdout


@pytest.fixture
def tiles_with_labels(tmp_path, monkeypatch, isolated_registry):
    """The example with `data_files=("labels.csv",)`, as a new author writes it, and that file
    written beside its images; returns the data root."""
    catalog.all_datasets()
    plugin = tmp_path / "tiles_labels.py"
    source = EXAMPLE.read_text().replace(
        "num_classes=len(COLOURS),", 'num_classes=len(COLOURS),\n    data_files=("labels.csv",),'
    )
    assert 'data_files=("labels.csv",)' in source
    plugin.write_text(source)
    monkeypatch.setenv("FEDBENCH_DATASETS", str(plugin))
    isolated_registry(DATASETS)
    catalog.all_datasets()
    assert not DATASETS.errors
    root = tmp_path / "data"
    folder = catalog.dataset_info("tiles").path(root)
    folder.mkdir(parents=True)
    (folder / "labels.csv").write_text("red,green,blue,yellow\n")
    return root


def test_data_files_may_be_names_in_the_dataset_folder(tiles_with_labels, fedbench, tmp_path):
    loader = catalog.dataset_info("tiles").loader
    module = sys.modules[loader.__module__]  # the plugin file as FEDBENCH_DATASETS loaded it
    module.make_images(tiles_with_labels)
    out = tmp_path / "runs"
    done = fedbench(
        "run", "--dataset", "tiles", "--protocol", "dirichlet", "--clients", 2, "--shots", 2, "--rounds", 1,
        "--batch-size", 4, "--backbone", TINY, "--pretrained", "none", "--data-root", tiles_with_labels,
        "--out", out, "--wandb", "disabled",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    identity = yaml.safe_load((next(out.glob("promptfl_tiles_*")) / "config.yaml").read_text())["identity"]
    assert list(identity["data"][0]["files"]) == ["labels.csv"]  # hashed into the cell's identity


@pytest.mark.parametrize(
    ("data_files", "message"),
    [
        ("labels.csv", "data_files must be a tuple of file names relative to the dataset folder"),
        (
            ("/etc/labels.csv",),
            "data_files must name files inside the dataset folder, relative to it; got '/etc/labels.csv'",
        ),
        (
            ("../labels.csv",),
            "data_files must name files inside the dataset folder, relative to it; got '../labels.csv'",
        ),
        ((3,), "data_files must be a tuple of file names"),
    ],
)
def test_bad_data_files_are_refused_at_registration(data_files, message, isolated_registry):
    from data.registry import register_dataset

    catalog.all_datasets()
    isolated_registry(DATASETS)
    with pytest.raises(ValueError, match=re.escape(f"@register_dataset('bad'): {message}")):
        register_dataset("bad", folder="bad", layout="x", how_to_get="y", data_files=data_files)(lambda f, t: None)
