"""Fake datasets in memory and a recording accuracy, for protocol tests (moved from
tests/data/test_combined.py)."""

from __future__ import annotations

import torch

from data.base import DatasetSplits, TensorImages
from data.transforms import clip_transforms

TRANSFORMS = clip_transforms(32, augment=False)


def _fake(
    name: str, num_classes: int, train_per_class: int = 3, test_per_class: int = 2, domains=None
) -> DatasetSplits:
    """An in-memory dataset; every image is a constant colour = its label (for the tests
    only the labels matter: the accuracy function is recorded, not computed)."""
    classes = [f"{name} class {c}" for c in range(num_classes)]
    splits = {}
    for split, per_class in (("train", train_per_class), ("test", test_per_class)):
        doms = domains or [None]
        labels = [c for _ in doms for c in range(num_classes) for _ in range(per_class)]
        tags = [d for d in doms for _ in range(num_classes * per_class)] if domains else None
        images = torch.tensor(labels, dtype=torch.uint8).view(-1, 1, 1, 1).expand(-1, 4, 4, 3).contiguous()
        splits[split] = TensorImages(f"{name}/{split}", images, labels, classes, TRANSFORMS.test, domains=tags)
    return DatasetSplits(
        name, splits["train"], splits["test"], classes, domain_names=list(domains) if domains else None
    )


class Recorder:
    """An accuracy function that records its calls and answers from a table."""

    def __init__(self, answer):
        self.calls = []
        self.answer = answer

    def __call__(self, indices, class_ids):
        indices, class_ids = list(indices), tuple(class_ids)
        self.calls.append((indices, class_ids))
        return self.answer(indices, class_ids)


def _evaluate(protocol, dataset, partition, accuracy):
    from conftest import client_metrics_with

    per_client = {
        c.client_id: client_metrics_with(accuracy, protocol, c, partition, dataset) for c in partition.clients
    }
    return per_client, protocol.summarize(per_client, partition)
