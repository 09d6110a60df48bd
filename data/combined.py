"""Several datasets as one: the data of a federation that spans datasets.

The FedTPG / FedMVP protocols train one federation on several datasets at once (nine
for base-to-new) or train on one and test on others (ImageNet to its variants). The
combined dataset concatenates the members' splits into one label space, each member's
classes in a block of its own (offset), so that partitions, the simulator and
evaluation keep working on plain `DatasetSplits`. A `Member` records where each block is.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

from data.base import DatasetSplits, LabeledImages
from data.transforms import ImageTransforms


@dataclass(frozen=True)
class Member:
    """One dataset inside a combined one: its classes are `offset .. offset + num_classes - 1`
    of the combined label space; its test images are `test_start .. test_stop - 1`.
    `trains`: its train split is part of the combined train split."""

    name: str
    offset: int
    num_classes: int
    test_start: int
    test_stop: int
    trains: bool = True

    @property
    def class_ids(self) -> tuple[int, ...]:
        return tuple(range(self.offset, self.offset + self.num_classes))

    @property
    def test_indices(self) -> range:
        return range(self.test_start, self.test_stop)


def members_of(dataset: DatasetSplits) -> list[Member]:
    """The members of a combined dataset; a plain dataset is its own single member."""
    members = dataset.extra.get("members")
    if members is not None:
        return list(members)
    return [Member(dataset.name, 0, len(dataset.class_names), 0, len(dataset.test))]


class ConcatImages(LabeledImages):
    """Splits of several datasets one after the other, labels shifted by each one's offset."""

    def __init__(
        self, name: str, parts: Sequence[LabeledImages], offsets: Sequence[int], class_names: Sequence[str]
    ) -> None:
        labels = [y + offset for part, offset in zip(parts, offsets) for y in part.labels]
        domains = None
        if parts and all(p.domains is not None for p in parts):
            domains = [d for p in parts for d in p.domains]
        super().__init__(name, labels, class_names, domains, cache_key="+".join(p.cache_key for p in parts))
        self.parts = list(parts)
        self.starts = [0]
        for part in self.parts:
            self.starts.append(self.starts[-1] + len(part))

    def load(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self):
            raise IndexError(index)
        part = bisect.bisect_right(self.starts, index) - 1
        return self.parts[part].load(index - self.starts[part])

    def raw(self, index: int):
        part = bisect.bisect_right(self.starts, index) - 1
        return self.parts[part].raw(index - self.starts[part])

    def raw_key(self, index: int) -> str:
        part = bisect.bisect_right(self.starts, index) - 1
        return self.parts[part].raw_key(index - self.starts[part])


def combine(
    name: str, train_members: Sequence[DatasetSplits], test_only: Sequence[DatasetSplits] = ()
) -> DatasetSplits:
    """One dataset from several: train = the train splits of `train_members`, test = the test
    splits of every member (train members first), classes = every member's, in blocks."""
    members: list[Member] = []
    class_names: list[str] = []
    test_parts, train_parts, train_offsets = [], [], []
    for dataset, trains in [(d, True) for d in train_members] + [(d, False) for d in test_only]:
        start = sum(len(p) for p in test_parts)
        members.append(
            Member(dataset.name, len(class_names), len(dataset.class_names), start, start + len(dataset.test), trains)
        )
        if trains:
            train_parts.append(dataset.train)
            train_offsets.append(len(class_names))
        test_parts.append(dataset.test)
        class_names.extend(dataset.class_names)
    offsets = [m.offset for m in members]
    train = ConcatImages(f"{name}/train", train_parts, train_offsets, class_names)
    test = ConcatImages(f"{name}/test", test_parts, offsets, class_names)
    return DatasetSplits(name, train, test, class_names, extra={"members": tuple(members)})


def load_datasets(
    names: Sequence[str],
    root: Path | str,
    transforms: ImageTransforms,
    test_only: Sequence[str] = (),
    seed: int | None = None,
) -> DatasetSplits:
    """The data of one run: `names` (trained on) and `test_only` (evaluated only). One name
    and nothing test-only loads that dataset as it is. `seed`: the run's, for the datasets
    that draw their held-out images per seed (`data.catalog.load_dataset`)."""
    from data.catalog import load_dataset

    names, test_only = list(names), [n for n in test_only if n not in names]
    if len(names) == 1 and not test_only:
        return load_dataset(names[0], root, transforms, seed)
    loaded = [load_dataset(n, root, transforms, seed) for n in names]
    extra = [load_dataset(n, root, transforms, seed) for n in test_only]
    return combine("+".join(names + test_only), loaded, extra)
