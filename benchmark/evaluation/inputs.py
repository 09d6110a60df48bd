"""What every accuracy computation feeds the model: the test images in batches, as cached
frozen features, the cached frozen image prefix, or images, and their targets."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import torch
from torch.utils.data import DataLoader, Subset

from benchmark import shortcuts
from benchmark.federation.features import FeatureCache
from benchmark.method import FederatedMethod
from data.base import LabeledImages


def targets(split: LabeledImages, indices: Sequence[int], class_ids: Sequence[int]) -> torch.Tensor:
    """The labels of images `indices` as positions in `class_ids`, which must hold them."""
    to_local = {c: i for i, c in enumerate(class_ids)}
    stray = next((i for i in indices if split.labels[i] not in to_local), None)
    if stray is not None:
        raise ValueError(f"image {stray} of {split.name} has label {split.labels[stray]}, not among the classes scored")
    return torch.tensor([to_local[split.labels[i]] for i in indices])


def input_batches(
    method: FederatedMethod,
    split: LabeledImages,
    indices: list[int],
    cache: FeatureCache | None,
    batch_size: int,
    num_workers: int = 0,
) -> Iterator[tuple[Any, int]]:
    """(inputs, position of its first image in `indices`) in batches of `batch_size`. With a
    `cache`, frozen work on the images is done once per image for every client: all of it
    for `frozen_image_features` methods (cached features), the first `frozen_image_blocks`
    image blocks for others under the shortcuts (an `ImagePrefix`); else images."""
    device = method.device
    prefix_blocks = method.frozen_image_blocks if shortcuts.active() else 0
    if cache is not None and method.frozen_image_features:
        features = cache.features(method, split, indices)[indices]
        for start in range(0, len(indices), batch_size):
            yield features[start : start + batch_size].to(device), start
    elif cache is not None and prefix_blocks > 0:
        for start in range(0, len(indices), batch_size):
            batch = indices[start : start + batch_size]
            yield cache.image_prefix(method.backbone, split, batch, prefix_blocks, device), start
    else:
        loader = DataLoader(Subset(split, indices), batch_size=batch_size, num_workers=num_workers)
        start = 0
        for images, _ in loader:
            yield images.to(device), start
            start += len(images)
