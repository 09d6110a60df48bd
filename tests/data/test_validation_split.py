"""The test split is never read while tuning, whatever the image source.

`validation_view` (what a tuning run, `eval_split = val`, sees) seals the loaded dataset's
test split; reading any image of it then raises. The check sits in `LabeledImages`, which
every image source goes through, so it holds for image files (CoOp's split_zhou layout,
FedBN's split pickles), in-memory tensors (the toy world, generated) and CIFAR's pickle
batches -- and for layouts with a validation split of their own, where the view takes it
instead of holding part of train out."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import TINY, tiny_config
from fake_layouts import make_fake_dataset

from data.catalog import load_dataset
from data.transforms import clip_transforms
from data.validation import validation_view

TRANSFORMS = clip_transforms(32, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), False)

# dataset -> (image source, whether the layout has a validation split of its own)
SOURCES = {
    "dtd": ("image files listed in a split_zhou JSON, with val entries", True),
    "domainnet": ("image files listed in FedBN's split pickles", False),
    "cifar10": ("CIFAR's pickle batches, held as a tensor", False),
    "toy": ("the toy world: generated tensors, with a generated val split", True),
}


def _load(name, root):
    if name == "toy":
        return load_dataset("toy", root, TRANSFORMS)
    make_fake_dataset(name, root, num_classes=2)
    return load_dataset(name, root, TRANSFORMS)


@pytest.mark.parametrize("name", list(SOURCES))
def test_the_validation_view_seals_the_test_split(tmp_path, name):
    dataset = _load(name, tmp_path)
    test_split = dataset.test
    test_split.load(0)  # readable before tuning
    view, record = validation_view(dataset)
    with pytest.raises(RuntimeError, match=r"sealed \(tuning selects on validation data only"):
        test_split.load(len(test_split) - 1)
    with pytest.raises(RuntimeError, match="sealed"):
        test_split[0]  # the Dataset protocol a DataLoader uses
    own_val = SOURCES[name][1]
    assert (view.test is dataset.val) == own_val and record["source"].startswith(
        "the dataset's own validation split" if own_val else "held-out part of train"
    )
    for split in (view.train, view.test):  # what tuning does read stays readable
        split.load(0), split.load(len(split) - 1)


def test_a_combined_dataset_and_a_subset_of_a_sealed_split_are_sealed(tmp_path):
    from data.base import SubsetImages
    from data.combined import load_datasets

    for name in ("dtd", "cifar10"):
        make_fake_dataset(name, tmp_path, num_classes=2)
    combined = load_datasets(["dtd", "cifar10"], tmp_path, TRANSFORMS)
    view, _ = validation_view(combined)
    last = len(combined.test) - 1  # a CIFAR image, behind the DTD ones
    with pytest.raises(RuntimeError, match="sealed"):
        combined.test.load(last)
    dtd = load_dataset("dtd", tmp_path, TRANSFORMS)
    subset = SubsetImages("dtd/test-part", dtd.test, [0, 1], transform=TRANSFORMS.train)
    validation_view(dtd)
    with pytest.raises(RuntimeError, match="sealed"):
        subset.load(0)  # made before the seal, under another transform: the same images


@pytest.mark.parametrize("name", ["dtd", "cifar10", "toy"])
def test_a_tuning_run_reads_no_test_image_and_an_ordinary_run_does(tmp_path, monkeypatch, name):
    """A tuning run on each kind of source finishes, so it read no image of the sealed test
    split; the same run scored on the test split reads it (so the seal would have caught it)."""
    import benchmark.runs.preparation as preparation
    import benchmark.runs.runner as runner
    from benchmark.federation.features import FeatureCache
    from data.base import LabeledImages

    monkeypatch.setattr(preparation, "SHARED_FEATURES", FeatureCache())  # no features cached by an earlier test
    root = tmp_path / "data"
    if name != "toy":
        make_fake_dataset(name, root, num_classes=4)
    protocol = "dirichlet" if name == "cifar10" else "base2novel"
    config = tiny_config(
        root, tmp_path, dataset=name, protocol=protocol, method="zeroshot", backbone=TINY, clients=2, shots=2
    )
    tuning = runner.run_experiment(dataclasses.replace(config, eval_split="val"), write=False, progress=False)
    assert tuning.summary["eval_split"] == "val"

    reads = []
    original = LabeledImages.__getitem__
    monkeypatch.setattr(LabeledImages, "__getitem__", lambda self, i: reads.append(self.name) or original(self, i))
    runner.run_experiment(config, write=False, progress=False)
    assert f"{name}/test" in reads


def test_a_tuning_run_seals_the_test_split_it_loaded(tmp_path, fake_data_root, monkeypatch):
    import benchmark.runs.preparation as preparation
    import benchmark.runs.runner as runner

    seen = []

    def view(dataset):
        seen.append(dataset)
        return validation_view(dataset)

    monkeypatch.setattr(preparation, "validation_view", view)
    config = tiny_config(fake_data_root, tmp_path, method="zeroshot", eval_split="val")
    runner.run_experiment(config, write=False, progress=False)
    (loaded,) = seen
    with pytest.raises(RuntimeError, match="sealed"):
        loaded.test.load(0)
    assert json.dumps(loaded.test.sealed)  # a reason to show, not a flag
