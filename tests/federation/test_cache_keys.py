"""The caches of frozen activations a process keeps across runs (a sweep, the demo) are keyed
by everything that computes an entry: two cells that differ in the precision, TF32, compiled
blocks, the augmentation backend or the exact shortcuts never read each other's entries.

The caches: the features of augmented views (`ViewFeatures`), the frozen image features and
image prefixes of the test images (`FeatureCache`), and the backbone's frozen text prefixes.
Each is wrapped to record the keys it is asked for; a variant cell must ask for none of the
keys the baseline cell asked for (the augmentation backend: of the views' cache, the one it
computes). (Decoded images, `data.decoded`, are uint8 pixels decoded by
PIL: no setting here changes them, and their key is the split, the images and the side.)
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

import pytest
from conftest import method_config

from benchmark import compiled
from benchmark.backbone import load_backbone
from benchmark.federation.features import FeatureCache, ViewFeatures
from benchmark.runs import preparation
from benchmark.runs.runner import run_experiment

# clip_adapter reads view features, test-image features and zero-shot text prefixes; pfedmma
# reads test-image prefixes and text prefixes from its first adapted block on.
METHODS = ("clip_adapter", "pfedmma")
VARIANTS = {
    "precision": {"precision": "bf16-mixed"},
    "tf32": {"tf32": True},
    "compile_blocks": {"compile_blocks": True},
    "augment_backend": {"augment_backend": "device"},
    "shortcuts": {"shortcuts": False},
}


class Recorded:
    """A mapping that records every key it is asked about."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: set = set()

    def __contains__(self, key) -> bool:
        self.asked.add(key)
        return super().__contains__(key)

    def get(self, key, default=None):
        self.asked.add(key)
        return super().get(key, default)

    def setdefault(self, key, default=None):
        self.asked.add(key)
        return super().setdefault(key, default)


class RecordedDict(Recorded, dict):
    pass


class RecordedOrderedDict(Recorded, OrderedDict):
    pass


def asked_keys(overrides: dict, fake_data_root, tmp_path, monkeypatch) -> dict[str, set]:
    """The keys each cache was asked for by a cell (`overrides` on the baseline) of each of
    METHODS, with caches shared by the cell's runs (as in a sweep) and fresh for the cell."""
    views, features = ViewFeatures(), FeatureCache(progress=False)
    views._store, features._store, features._prefixes = RecordedOrderedDict(), RecordedDict(), RecordedDict()
    monkeypatch.setattr(preparation, "SHARED_VIEWS", views)
    monkeypatch.setattr(preparation, "SHARED_FEATURES", features)
    text = load_backbone("fedbench-tiny-vit", None)._text_prefixes
    text._entries = RecordedOrderedDict(text._entries)
    for method in METHODS:
        config = method_config(method, fake_data_root, tmp_path, augment=True, rounds=1, clients=2)
        run_experiment(dataclasses.replace(config, **overrides), write=False, progress=False)
    return {
        "views": set(views._store.asked),
        "features": set(features._store.asked),
        "image prefixes": set(features._prefixes.asked),
        "text prefixes": set(text._entries.asked),
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, fake_data_root):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return asked_keys({}, fake_data_root, tmp_path_factory.mktemp("baseline"), monkeypatch)


def test_the_baseline_reads_every_cache(baseline):
    assert all(baseline.values()), {name: len(keys) for name, keys in baseline.items()}


@pytest.mark.parametrize("setting", list(VARIANTS))
def test_cells_that_differ_in_a_setting_share_no_cache_entry(setting, baseline, fake_data_root, tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "BACKEND", "eager")  # the same tracing, no code generation
    variant = asked_keys(VARIANTS[setting], fake_data_root, tmp_path, monkeypatch)
    # The augmentation backend computes the training views only: the test images' features
    # and prefixes are the same computation in both cells, and shared.
    caches = ["views"] if setting == "augment_backend" else list(variant)
    for cache in caches:
        assert not variant[cache] & baseline[cache], f"{setting}: the {cache} cache shares entries with the baseline"
    assert variant["views"], "the variant read no view features"
