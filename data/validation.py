"""The validation split that tuning selects on, for every dataset.

Where it comes from, in order:
  1. the dataset's own validation split (`DatasetSplits.val`: the CoOp split files'
     "val" entries, the toy world's generated val split);
  2. otherwise a deterministic held-out part of train: `HOLDOUT_FRACTION` of each class's
     train images (at least one, and only from classes with two or more), drawn with the
     fixed `HOLDOUT_SEED` so every method and every trial sees the same images.

`validation_view` returns the dataset as a tuning run sees it: `test` *is* the validation
split and the real test split is dropped, so nothing downstream can read a test image; and
the test split is sealed, so that code still holding it (the loaded dataset) cannot either:
reading one of its images raises `SealedSplitError`, whatever the image source (files,
tensors, CIFAR's pickles, a combined dataset). The returned record goes into the run's
partition manifest.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any, Sequence

from data.base import DatasetError, DatasetSplits, SubsetImages

HOLDOUT_FRACTION = 0.2
HOLDOUT_SEED = 0  # fixed: the held-out images must not change with the run seed


def holdout_indices(labels: Sequence[int], fraction: float = HOLDOUT_FRACTION, seed: int = HOLDOUT_SEED) -> list[int]:
    """Train indices held out for validation: round(fraction * n_c) per class (at least 1)
    for every class with n_c >= 2 images, drawn per class in label order; sorted."""
    by_class: dict[int, list[int]] = defaultdict(list)
    for index, label in enumerate(labels):
        by_class[int(label)].append(index)
    rng = random.Random(seed)
    held: list[int] = []
    for label in sorted(by_class):
        pool = by_class[label]
        if len(pool) >= 2:
            held.extend(rng.sample(pool, max(1, round(fraction * len(pool)))))
    return sorted(held)


def validation_view(dataset: DatasetSplits) -> tuple[DatasetSplits, dict[str, Any]]:
    """(the dataset with `test` replaced by its validation split, a record of where the
    validation images came from). The real test split is not part of the view, and it is
    sealed: reading any of its images raises `SealedSplitError`."""
    dataset.test.seal("tuning selects on validation data only: the test split is never read while tuning")
    if dataset.val is not None and len(dataset.val) > 0:
        view = DatasetSplits(
            dataset.name, dataset.train, dataset.val, dataset.class_names, dataset.domain_names, dataset.extra
        )
        return view, {"split": "val", "source": f"the dataset's own validation split ({len(dataset.val)} images)"}
    held = holdout_indices(dataset.train.labels)
    if not held:
        raise DatasetError(
            f"{dataset.name} has no validation split and no class with two train images to hold out "
            f"({len(dataset.train)} train images); tuning needs validation data. Tune on a dataset with a train "
            "split (test-only sets such as the ImageNet variants are evaluated with values tuned elsewhere)."
        )
    held_set = set(held)
    kept = [i for i in range(len(dataset.train)) if i not in held_set]
    tag = f"holdout-f{HOLDOUT_FRACTION}-s{HOLDOUT_SEED}"
    train = SubsetImages(f"{dataset.name}/train-kept", dataset.train, kept, key=f"{tag}-kept")
    transform = getattr(dataset.test, "transform", None)  # validation images get the test transform
    val = SubsetImages(f"{dataset.name}/val-heldout", dataset.train, held, transform=transform, key=f"{tag}-val")
    view = DatasetSplits(dataset.name, train, val, dataset.class_names, dataset.domain_names, dataset.extra)
    record = {
        "split": "val",
        "source": "held-out part of train (the dataset has no validation split)",
        "fraction": HOLDOUT_FRACTION,
        "seed": HOLDOUT_SEED,
        "holdout_train_indices": held,
        "note": "client train_indices count positions among the remaining train images, in order",
    }
    return view, record
