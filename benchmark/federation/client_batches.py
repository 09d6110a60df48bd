"""A client-round's training batches, reproducible whatever loads them.

`ClientTrainSet` is a client's images with labels in its own label space, fetched by
(epoch, position) in an order `EpochTaggedSampler` draws from (seed, epoch) alone, each
image augmented from a generator seeded by (client-round seed, epoch, position): the same
batches with any number of loading workers. `ClientBatches` is one client-round's local
epochs of them, `StreamBatches` a central run's steps per epoch, `ClientSets` what the
schedule's one loader (`benchmark.federation.loading`) builds its items from.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from benchmark.federation.features import ViewFeatures
from benchmark.federation.loading import steps_per_epoch
from data.augmentation import view_seed
from data.base import LabeledImages
from data.decoded import DeviceImages
from data.partition import ClientShard


class ClientTrainSet(Dataset):
    """A client's training images with labels mapped into its own label space.

    Items are fetched by (epoch, position) (see `EpochTaggedSampler`). An image's random
    augmentation is drawn from a generator seeded by (client-round seed, epoch, position),
    never from whatever RNG state the loading process has, so results are the same with
    any `num_workers` (each worker's RNG would otherwise depend on the worker layout).
    """

    def __init__(
        self,
        images: LabeledImages | torch.Tensor | DeviceImages,
        labels: Sequence[int],
        shard: ClientShard,
        seed: int = 0,
    ) -> None:
        # a LabeledImages split, precomputed features [N, D], or the split decoded on the device
        # (`--augment-backend device`: augmented a batch at a time there, `data.decoded`)
        self.images = images
        # (cache, key prefix, encoder): features of augmented batches shared across methods
        # (`features.ViewFeatures`); set by the simulator for frozen-image-tower methods
        self.shared: tuple[ViewFeatures, tuple, Callable[[torch.Tensor], torch.Tensor]] | None = None
        self.indices = list(shard.train_indices)
        to_local = {c: i for i, c in enumerate(shard.train_classes)}
        self.labels = [to_local[labels[i]] for i in self.indices]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key: int | tuple[int, int]):
        epoch, i = key if isinstance(key, tuple) else (0, key)
        index = self.indices[i]
        if isinstance(self.images, torch.Tensor):  # cached features: nothing random
            return self.images[index], self.labels[i]
        if isinstance(self.images, DeviceImages):  # one view, as a batch of one
            return self.images.views(self.seed, [(epoch, i, index)])[0], self.labels[i]
        with torch.random.fork_rng(devices=[]):  # torchvision's random transforms draw from torch's CPU RNG
            torch.default_generator.manual_seed(view_seed(self.seed, epoch, i))
            image = self.images.load(index)
        return image, self.labels[i]

    def batch(self, keys: Sequence[tuple[int, int]]):
        """The items of `keys` collated as a DataLoader collates them; cached features are
        gathered in one indexing instead of one tensor per item. With `shared` set, the
        batch's frozen features in place of its images, computed once per process."""
        if self.shared is not None and not isinstance(self.images, torch.Tensor):
            cache, prefix, encode = self.shared
            key = (*prefix, self.seed, tuple((epoch, i, self.indices[i]) for epoch, i in keys))
            features = cache.batch(key, lambda: encode(self._images(keys)[0]), pool=prefix[1])  # the feature kind
            return [features, torch.tensor([self.labels[i] for _, i in keys])]
        return self._images(keys)

    def _images(self, keys: Sequence[tuple[int, int]]):
        if isinstance(self.images, torch.Tensor):
            positions = [i for _, i in keys]
            inputs = self.images[[self.indices[i] for i in positions]]
            return [inputs, torch.tensor([self.labels[i] for i in positions])]
        if isinstance(self.images, DeviceImages):  # every view of the batch in one resample on the device
            views = [(epoch, i, self.indices[i]) for epoch, i in keys]
            return [self.images.views(self.seed, views), torch.tensor([self.labels[i] for _, i in keys])]
        return default_collate([self[key] for key in keys])


class EpochTaggedSampler(Sampler):
    """Yields (epoch, position) in a shuffled order that is a function of (seed, epoch) only --
    not of how many iterators the loader made or of generator draws that depend on the
    worker layout -- so each local epoch gets its own order and its own augmentations.
    Lightning calls `set_epoch` at the start of every epoch; without it, passes are counted."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        order_seed = int(np.random.SeedSequence([self.seed, epoch]).generate_state(1, np.uint64)[0])
        for position in torch.randperm(self.size, generator=torch.Generator().manual_seed(order_seed)).tolist():
            yield epoch, position


class ClientBatches:
    """A client-round's training batches, one pass per iteration: the order of
    `EpochTaggedSampler`, collated as a DataLoader collates. With `num_workers` > 0 a
    DataLoader's worker processes load them; in this process (0) they are collated
    directly, without a DataLoader iterator's per-pass setup (~0.1 ms a pass)."""

    def __init__(self, dataset: ClientTrainSet, batch_size: int, seed: int, num_workers: int) -> None:
        self.dataset, self.batch_size = dataset, batch_size
        self.sampler = EpochTaggedSampler(len(dataset), seed)
        self.loader = None
        if num_workers > 0 and not isinstance(dataset.images, DeviceImages):  # device images: no worker
            self.loader = DataLoader(
                dataset,
                batch_size=batch_size,
                sampler=self.sampler,
                num_workers=num_workers,
                generator=torch.Generator().manual_seed(seed),  # seeds the workers' RNGs, which nothing here draws from
            )

    def __len__(self) -> int:
        return steps_per_epoch(len(self.dataset), self.batch_size)

    def __iter__(self):
        if self.loader is not None:
            yield from self.loader
            return
        keys = list(self.sampler)
        for start in range(0, len(keys), self.batch_size):
            yield self.dataset.batch(keys[start : start + self.batch_size])


class ClientSets:
    """(round index, client id) -> that client-round's `ClientTrainSet`: what a worker of the
    schedule's one loader (`benchmark.federation.loading`) builds its items from."""

    def __init__(self, images, labels: Sequence[int], shards: dict[int, ClientShard], seeds: dict) -> None:
        self.images, self.labels, self.shards, self.seeds = images, list(labels), shards, seeds

    def __call__(self, round_index: int, cid: int) -> ClientTrainSet:
        return ClientTrainSet(self.images, self.labels, self.shards[cid], self.seeds[round_index, cid])


class StreamBatches:
    """`steps` batches per iteration (one local epoch of a central run's client), drawn from
    consecutive shuffled passes over its images (`EpochTaggedSampler`'s passes 0, 1, ...)
    that go on across the iterations of one client-round. When the steps are one pass (the
    clients' sizes multiples of the batch size) an epoch is the same as a one-client
    federation's epoch on the union, batch for batch."""

    def __init__(self, dataset, batch_size: int, seed: int, steps: int) -> None:
        self.dataset, self.batch_size, self.steps = dataset, batch_size, steps
        self._keys = self._stream(EpochTaggedSampler(len(dataset), seed))

    def __len__(self) -> int:
        return self.steps

    @staticmethod
    def _stream(sampler: EpochTaggedSampler):
        while True:
            yield from sampler  # each pass is the sampler's next epoch

    def __iter__(self):
        for _ in range(self.steps):
            yield self.dataset.batch([next(self._keys) for _ in range(self.batch_size)])
