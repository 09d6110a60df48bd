"""CIFAR-10 / CIFAR-100 from the pickle batches torchvision downloads (Dirichlet protocol).

`cifar-10-batches-py/`: data_batch_1..5, test_batch, batches.meta (`label_names`);
`cifar-100-python/`: train, test, meta (`fine_label_names`). Each batch is a pickled dict
with `data` (uint8 [N, 3072], channel-major 32x32) and `labels` / `fine_labels`.
Read here directly so no torchvision code path can try to download.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from data.base import DatasetError, DatasetSplits, TensorImages
from data.registry import register_dataset
from data.transforms import ImageTransforms

_HOW = (
    "torchvision's CIFAR archive (https://www.cs.toronto.edu/~kriz/cifar.html), extracted "
    "under the data root, or run `fedbench data download {name}`."
)


def _unpickle(name: str, path: Path, layout: str) -> dict:
    if not path.is_file():
        raise DatasetError(
            f"{name}: {path} is missing; the CIFAR folder is incomplete. Expected layout: {layout}. "
            "Re-extract the archive or run `fedbench data download " + name + "`."
        )
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle, encoding="latin1")
    except Exception as exc:  # any unpickling failure means a damaged file
        raise DatasetError(
            f"{name}: {path} is not a CIFAR pickle ({exc.__class__.__name__}: {exc}); the file is corrupt. "
            f"Expected layout: {layout}. Re-extract the archive."
        ) from None


def _images_and_labels(name: str, batches: list[Path], label_key: str, layout: str) -> tuple[torch.Tensor, list[int]]:
    arrays, labels = [], []
    for path in batches:
        batch = _unpickle(name, path, layout)
        try:
            data = np.asarray(batch["data"], dtype=np.uint8)
            batch_labels = [int(y) for y in batch[label_key]]
        except (KeyError, TypeError, ValueError) as exc:
            raise DatasetError(
                f"{name}: {path} lacks CIFAR fields ({exc}); expected 'data' and '{label_key}'."
            ) from None
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(data) != len(batch_labels):
            raise DatasetError(
                f"{name}: {path} holds data of shape {data.shape} for {len(batch_labels)} labels; "
                "expected [N, 3072] (3x32x32, channel-major)."
            )
        arrays.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.extend(batch_labels)
    images = torch.from_numpy(np.ascontiguousarray(np.concatenate(arrays)))
    return images, labels


def read_cifar(
    name: str,
    folder: Path,
    train_files: list[str],
    test_files: list[str],
    meta_file: str,
    label_key: str,
    names_key: str,
    transforms: ImageTransforms,
    layout: str,
) -> DatasetSplits:
    meta = _unpickle(name, folder / meta_file, layout)
    if names_key not in meta:
        raise DatasetError(f"{name}: {folder / meta_file} has no '{names_key}'; expected the CIFAR meta file.")
    class_names = [str(c).replace("_", " ") for c in meta[names_key]]
    splits = {}
    for split, files in (("train", train_files), ("test", test_files)):
        images, labels = _images_and_labels(name, [folder / f for f in files], label_key, layout)
        splits[split] = TensorImages(
            f"{name}/{split}",
            images,
            labels,
            class_names,
            transforms.train if split == "train" else transforms.test,
            cache_key=f"{name}/{split}/{folder.resolve()}/{transforms.key}",
        )
    return DatasetSplits(name, splits["train"], splits["test"], class_names)


_C10_LAYOUT = "cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta} (torchvision pickles)"
_C100_LAYOUT = "cifar-100-python/{train, test, meta} (torchvision pickles)"
# pFedMMA, FedOTP and FedPGP pass `<root>/cifar-10` (`cifar-100`) to torchvision as its root
# (their datasets/cifar10.py: dataset_dir = "cifar-10"), so the batches land one level down.
_FEDOTP = "pFedMMA/FedOTP/FedPGP"


@register_dataset(
    "cifar10",
    folder="cifar-10-batches-py",
    layout=_C10_LAYOUT,
    how_to_get=_HOW.format(name="cifar10"),
    protocol="dirichlet",
    num_classes=10,
    source="torchvision",
    also_at=(("cifar-10/cifar-10-batches-py", _FEDOTP),),
    # The class names; the batches are the images (with their labels).
    data_files=lambda folder: (folder / "batches.meta",),
)
def load_cifar10(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    return read_cifar(
        "cifar10",
        folder,
        [f"data_batch_{i}" for i in range(1, 6)],
        ["test_batch"],
        "batches.meta",
        "labels",
        "label_names",
        transforms,
        _C10_LAYOUT,
    )


@register_dataset(
    "cifar100",
    folder="cifar-100-python",
    layout=_C100_LAYOUT,
    how_to_get=_HOW.format(name="cifar100"),
    protocol="dirichlet",
    num_classes=100,
    source="torchvision",
    also_at=(("cifar-100/cifar-100-python", _FEDOTP),),
    data_files=lambda folder: (folder / "meta",),
)
def load_cifar100(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    return read_cifar(
        "cifar100", folder, ["train"], ["test"], "meta", "fine_labels", "fine_label_names", transforms, _C100_LAYOUT
    )
