"""What every dataset in the suite is: labelled image splits with a fixed class order.

A loader (real on-disk layout, CIFAR pickles or the toy world) returns a `DatasetSplits`;
everything downstream (few-shot sampling, partitions, the simulator, evaluation) sees
only this interface and never a dataset's own file format.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch.utils.data import Dataset

from benchmark.errors import UserError

Transform = Callable[[object], torch.Tensor]


class DatasetError(UserError, RuntimeError):
    """A dataset is missing, incomplete or corrupt. The message says what to do."""


class SealedSplitError(RuntimeError):
    """An image of a sealed split was read: a bug in the suite, never the user's doing (tuning
    seals the test split, so that no test image can reach a tuning run's numbers)."""


class LabeledImages(Dataset):
    """One split of a dataset: image `i` has label `labels[i]`, an index into `class_names`.

    Subclasses implement `load(i)` returning a tensor [3, H, W] (already transformed).
    `labels` and `domains` are plain lists so partitions never need to touch an image.
    `cache_key` identifies the images *and* the transform, so cached features of a
    split are never reused under another transform.
    """

    def __init__(
        self,
        name: str,
        labels: Sequence[int],
        class_names: Sequence[str],
        domains: Sequence[str] | None = None,
        cache_key: str | None = None,
    ) -> None:
        self.name = name
        self.labels = [int(y) for y in labels]
        self.class_names = list(class_names)
        self.domains = list(domains) if domains is not None else None
        self.cache_key = cache_key or name
        if self.domains is not None and len(self.domains) != len(self.labels):
            raise ValueError(f"{name}: {len(self.domains)} domains for {len(self.labels)} images")
        bad = [y for y in self.labels if not 0 <= y < len(self.class_names)]
        if bad:
            raise DatasetError(
                f"{name}: label {bad[0]} is outside 0..{len(self.class_names) - 1} "
                f"({len(self.class_names)} classes); the split file does not match the class list"
            )

    # Why reading an image of this split is an error (`seal`); None: it may be read.
    sealed: str | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        # Every image source (files, tensors, subsets, concatenations, a plugin's own class)
        # reads through its `load`: guarding each class's `load` here means no source can
        # forget the check.
        super().__init_subclass__(**kwargs)
        for reader in ("load", "raw"):
            if reader in cls.__dict__:
                setattr(cls, reader, _refuse_when_sealed(cls.__dict__[reader]))

    def seal(self, reason: str) -> None:
        """From now on, reading any image of this split raises `SealedSplitError` naming `reason`."""
        self.sealed = reason

    def __len__(self) -> int:
        return len(self.labels)

    def load(self, index: int) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def raw(self, index: int):
        """Image `index` as stored, before any transform: an RGB PIL image. What the device
        augmentation decodes once (`data.decoded`); a source without it trains with
        `--augment-backend pil`."""
        raise DatasetError(
            f"{self.name}: {type(self).__name__} gives no untransformed images, which --augment-backend device "
            "decodes once; run with --augment-backend pil"
        )

    def raw_key(self, index: int) -> str:
        """What names image `index`'s stored bytes in the decoded-image cache (`data.decoded`)."""
        return f"{self.cache_key}#{index}"

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.load(index), self.labels[index]


def _refuse_when_sealed(load: Callable[[LabeledImages, int], torch.Tensor]) -> Callable:
    @functools.wraps(load)
    def guarded(self: LabeledImages, index: int) -> torch.Tensor:
        if self.sealed is not None:
            raise SealedSplitError(
                f"{self.name}: image {index} was read, but this split is sealed ({self.sealed}). This is a bug "
                "in the suite, not in your data or settings: please report it with the command you ran."
            )
        return load(self, index)

    return guarded


class FileImages(LabeledImages):
    """Images stored as files (JPEG/PNG), decoded with PIL and transformed on access."""

    def __init__(
        self,
        name: str,
        paths: Sequence[Path | str],
        labels: Sequence[int],
        class_names: Sequence[str],
        transform: Transform,
        domains: Sequence[str] | None = None,
        cache_key: str | None = None,
    ) -> None:
        super().__init__(name, labels, class_names, domains, cache_key)
        if len(paths) != len(self.labels):
            raise ValueError(f"{name}: {len(paths)} paths for {len(self.labels)} labels")
        # Paths pass through as they are: re-parsing ImageNet's 1.3M would cost seconds.
        self.paths = [p if isinstance(p, Path) else Path(p) for p in paths]
        self.transform = transform

    def load(self, index: int) -> torch.Tensor:
        return self.transform(self.raw(index))

    def raw_key(self, index: int) -> str:
        return str(self.paths[index])  # the file list names the images (data.decoded adds sizes and times)

    def raw(self, index: int):
        from PIL import Image, UnidentifiedImageError

        path = self.paths[index]
        try:
            with Image.open(path) as img:
                img = img.convert("RGB")
        except FileNotFoundError:
            raise DatasetError(
                f"{self.name}: image {path} is listed in the split but does not exist. "
                "The dataset folder is incomplete: re-extract the archive or fix the split file."
            ) from None
        except (UnidentifiedImageError, OSError) as exc:
            raise DatasetError(
                f"{self.name}: image {path} cannot be decoded ({exc.__class__.__name__}: {exc}). "
                "The file is corrupt: replace it from the original archive."
            ) from None
        return img


class TensorImages(LabeledImages):
    """Images held in memory as a uint8 tensor [N, H, W, 3] (CIFAR, the toy world)."""

    def __init__(
        self,
        name: str,
        images: torch.Tensor,
        labels: Sequence[int],
        class_names: Sequence[str],
        transform: Transform,
        domains: Sequence[str] | None = None,
        cache_key: str | None = None,
    ) -> None:
        super().__init__(name, labels, class_names, domains, cache_key)
        if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"{name}: expected uint8 images [N, H, W, 3], got {images.dtype} {tuple(images.shape)}")
        if len(images) != len(self.labels):
            raise ValueError(f"{name}: {len(images)} images for {len(self.labels)} labels")
        self.images = images
        self.transform = transform

    def load(self, index: int) -> torch.Tensor:
        return self.transform(self.raw(index))

    def raw(self, index: int):
        from PIL import Image

        return Image.fromarray(self.images[index].numpy())


class SubsetImages(LabeledImages):
    """Images `indices` of another split, in that order, optionally under another transform
    (a validation part held out of train is read with the test transform)."""

    def __init__(
        self,
        name: str,
        source: LabeledImages,
        indices: Sequence[int],
        transform: Transform | None = None,
        key: str = "",
    ) -> None:
        indices = [int(i) for i in indices]
        domains = None if source.domains is None else [source.domains[i] for i in indices]
        super().__init__(
            name,
            [source.labels[i] for i in indices],
            source.class_names,
            domains,
            cache_key=f"{source.cache_key}[{key or name}]",
        )
        self.indices = indices
        self.source = self.origin = source
        if transform is not None:
            if not hasattr(source, "transform"):
                raise TypeError(f"{source.name} has no transform to replace")
            self.source = copy.copy(source)  # the same images, read under `transform`
            self.source.transform = transform

    def load(self, index: int) -> torch.Tensor:
        if self.origin.sealed is not None:  # sealed after the copy was made: the same images
            self.source.seal(self.origin.sealed)
        return self.source.load(self.indices[index])

    def raw(self, index: int):
        if self.origin.sealed is not None:
            self.source.seal(self.origin.sealed)
        return self.source.raw(self.indices[index])

    def raw_key(self, index: int) -> str:
        return self.source.raw_key(self.indices[index])


@dataclass
class DatasetSplits:
    """A dataset as the benchmark uses it: train and test splits over one class list.

    `class_names` is in the dataset's own, deterministic order: base/novel splits take
    the first half as base. `domain_names` is set for feature-shift datasets. `val` is the
    dataset's own validation split where its layout has one (tuning selects on it; see
    `data.validation` for datasets without one).
    """

    name: str
    train: LabeledImages
    test: LabeledImages
    class_names: list[str]
    domain_names: list[str] | None = None
    extra: dict = field(default_factory=dict)
    val: LabeledImages | None = None

    def __post_init__(self) -> None:
        for split in (self.train, self.test, self.val):
            if split is not None and split.class_names != self.class_names:
                raise ValueError(f"{self.name}: split {split.name} has a different class list")
