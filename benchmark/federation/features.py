"""Frozen image features, computed once per (backbone, split) and shared by all clients.

Exact: used only for methods whose `encode_images` depends on the frozen backbone alone
(`FederatedMethod.frozen_image_features`) and for splits under a deterministic transform.
Computed under the caller's autocast (the run's precision); keyed by the weights, what the
method reads of the tower, the split and its transform, and `backbone.computing_key` (device,
autocast, TF32, compiled blocks, shortcuts: tests/federation/test_cache_keys.py).

Every batch the cache encodes has exactly `batch_size` images (a short last batch is
padded with copies of its last image): on CPU a row's last bits depend on the batch's
size, so a feature must not depend on which other rows were asked for with it, or
before it in the same process.

Image prefixes: for a method whose image tower changes only from block k on
(`FederatedMethod.frozen_image_blocks` = k), the residual stream after the frozen blocks
1..k of each test image ([1 + M, W] fp32: ViT-B/16 605 KB per image), kept up to
`prefix_bytes` in all; images beyond it are recomputed when asked for (still exact).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Sequence

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from benchmark import flops
from benchmark.backbone import Backbone, ImagePrefix, computing_key
from benchmark.progress import progress_bar
from data.base import LabeledImages

# Host memory for image prefixes (all splits together): DTD's 1,692 test images on
# ViT-B/16 take 1.0 GB; a larger test set is kept in part.
PREFIX_CACHE_BYTES = 8 << 30


class FeatureCache:
    def __init__(
        self, batch_size: int = 64, num_workers: int = 0, progress: bool = True, prefix_bytes: int = PREFIX_CACHE_BYTES
    ) -> None:
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.progress = progress
        self.prefix_bytes = prefix_bytes
        self._store: dict[tuple[str, ...], tuple[Tensor, Tensor]] = {}  # key -> (features, done mask)
        self._prefixes: dict[tuple, dict[int, Tensor]] = {}  # key -> image index -> prefix [1 + M, W]
        self._prefix_used = 0

    @torch.no_grad()
    def features(self, method, split: LabeledImages, indices: list[int] | None = None) -> Tensor:
        """Features [len(split), ...] of `split` (what `method.encode_images` returns per
        image: [D], or [M, D] for patch features); rows outside `indices` may be unset."""
        key = (method.backbone.key, method.image_feature_kind, split.cache_key, computing_key(method.device))
        wanted = list(range(len(split))) if indices is None else list(indices)
        if key not in self._store:
            self._store[key] = (torch.empty(0), torch.zeros(len(split), dtype=torch.bool))
        feats, done = self._store[key]
        todo = [i for i in wanted if not done[i]]
        if todo:
            with flops.charge("features"):
                computed = self._encode(method, split, todo)
            if feats.numel() == 0:
                feats = torch.zeros(len(split), *computed.shape[1:], dtype=computed.dtype)
            feats[todo] = computed
            done[todo] = True
            self._store[key] = (feats, done)
        return feats

    @torch.no_grad()
    def image_prefix(
        self, backbone: Backbone, split: LabeledImages, indices: Sequence[int], blocks: int, device: torch.device
    ) -> ImagePrefix:
        """The image tower's state after its first `blocks` frozen blocks for images
        `indices` of `split`, in that order, on `device` (one batch: stacked)."""
        key = (backbone.key, blocks, split.cache_key, computing_key(device))
        rows = self._prefixes.setdefault(key, {})
        todo = [i for i in dict.fromkeys(indices) if i not in rows]
        fresh: dict[int, Tensor] = {}
        if todo:
            loader = DataLoader(Subset(split, todo), batch_size=self.batch_size, num_workers=self.num_workers)
            done = 0
            for images, _ in loader:
                with flops.charge("features"):  # shared by every client, like the frozen features
                    states = backbone.image_prefix(self._padded(images).to(device), blocks).tokens.cpu()
                states = states[: len(images)]
                for index, row in zip(todo[done : done + len(states)], states):
                    size = row.numel() * row.element_size()
                    if self._prefix_used + size <= self.prefix_bytes:
                        rows[index] = row.clone()  # its own storage, not a view of the batch
                        self._prefix_used += size
                    else:
                        fresh[index] = row
                done += len(states)
        tokens = torch.stack([rows[i] if i in rows else fresh[i] for i in indices])
        return ImagePrefix(tokens.to(device), blocks)

    def _encode(self, method, split: LabeledImages, indices: list[int]) -> Tensor:
        loader = DataLoader(Subset(split, indices), batch_size=self.batch_size, num_workers=self.num_workers)
        device = method.device
        out = []
        for images, _ in progress_bar(
            loader, desc=f"features {split.name}", unit="batches", enabled=self.progress, nested=True, leave=False
        ):
            out.append(method.encode_images(self._padded(images).to(device))[: len(images)].float().cpu())
        return torch.cat(out)

    def _padded(self, images: Tensor) -> Tensor:
        """`images` filled up to `batch_size` rows with copies of the last one."""
        short = self.batch_size - len(images)
        return torch.cat([images, images[-1:].expand(short, *images.shape[1:])]) if short > 0 else images


# Device memory for the features of augmented views (all runs of a process together): Table 1's
# 10 clients x 50 rounds x 2 epochs of DTD take ~150 MB of 512-float features. Per pool (kind of feature).
VIEW_CACHE_BYTES = 2 << 30


class ViewFeatures:
    """Frozen image features of augmented training batches, shared by the methods of a process
    (a sweep, the demo) whose image tower is frozen and unprompted (`frozen_image_features`).

    An augmented view is a function of (dataset, client-round seed, epoch, position, image) and
    of the backend that augments it -- never of the method -- and a batch of views is the same
    batch for every method of a cell's seed: its features are computed once, by the first
    method that trains on it, and handed to the next ones instead of its images. Exact: the
    same encoder on the same batch under the same autocast (tests/federation/test_view_features.py
    compares whole runs). Keyed by everything the features depend on (`ClientTrainSet.batch`
    builds the key). Each `pool` (the simulator's: the method's `image_feature_kind`) has its
    own `max_bytes`, its oldest batches leaving first past it: FedOTP's patch features (~400 KB
    a view on ViT-B/16, 200 times a pooled feature) would otherwise push out the pooled features
    every other method of a sweep reads next."""

    def __init__(self, max_bytes: int = VIEW_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._store: OrderedDict[Hashable, Tensor] = OrderedDict()  # every pool's entries
        self._pools: dict[Hashable, OrderedDict[Hashable, int]] = {}  # pool -> its keys, oldest first -> bytes
        self._used: dict[Hashable, int] = {}
        self.hits = self.misses = 0

    def batch(self, key: Hashable, compute: Callable[[], Tensor], pool: Hashable = None) -> Tensor:
        found = self._store.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        features = compute()
        size = features.numel() * features.element_size()
        if size <= self.max_bytes:
            order = self._pools.setdefault(pool, OrderedDict())
            self._store[key], order[key] = features, size
            self._used[pool] = self._used.get(pool, 0) + size
            while self._used[pool] > self.max_bytes:
                old, old_size = order.popitem(last=False)
                del self._store[old]
                self._used[pool] -= old_size
        return features

    @property
    def hit_rate(self) -> float:
        """Hits over lookups so far (nan before the first)."""
        asked = self.hits + self.misses
        return self.hits / asked if asked else float("nan")

    def clear(self) -> None:
        self._store.clear()
        self._pools.clear()
        self._used.clear()
