"""The CoOp split files (`split_zhou_<Name>.json`) that CoOp, FedOTP and pFedMMA share.

A file holds {"train": [[relative_path, label, class_name], ...], "val": [...], "test": [...]},
paths relative to the dataset's image folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from data.base import DatasetError, DatasetSplits, FileImages
from data.transforms import ImageTransforms

# Where CoOp's DATASETS.md links each split file (the missing-file message; `fedbench data download`).
SPLIT_ZHOU_LINKS = {
    "caltech101": "https://drive.google.com/file/d/1hyarUivQE36mY6jSomru6Fjd-JzwcCzN/view?usp=sharing",
    "oxford_pets": "https://drive.google.com/file/d/1501r8Ber4nNKvmlFVQZ8SeUHTcdTTEqs/view?usp=sharing",
    "oxford_flowers": "https://drive.google.com/file/d/1Pp0sRXzZFZq15zVOzKjKBu4A9i01nozT/view?usp=sharing",
    "food101": "https://drive.google.com/file/d/1QK0tGi096I0Ba6kggatX1ee6dJFIcEJl/view?usp=sharing",
    "dtd": "https://drive.google.com/file/d/1u3_QfB467jqHgNXC00UIzbLZRQCg2S7x/view?usp=sharing",
    "sun397": "https://drive.google.com/file/d/1y2RD81BYuiyvebdN-JymPfyWYcd8_MUq/view?usp=sharing",
    "ucf101": "https://drive.google.com/file/d/1I0S0q91hJfsV9Gf4xDIjgDq4AqBNJb1y/view?usp=sharing",
    "stanford_cars": "https://drive.google.com/file/d/1ObCFbaAgVu0I-k_Au-gIUcefirdAuizT/view?usp=sharing",
    "eurosat": "https://drive.google.com/file/d/1Ip7yaCWFi0eaOFUGga0lUdVi_DDQth1o/view?usp=sharing",
}


def read_split_zhou(name: str, split_file: Path, image_dir: Path, transforms: ImageTransforms) -> DatasetSplits:
    """Read a split_zhou JSON into train/val/test `FileImages` (val: None when the file has no
    "val" entries); classes ordered by label."""
    if not split_file.is_file():
        link = SPLIT_ZHOU_LINKS.get(name)
        raise DatasetError(
            f"{name}: split file {split_file} is missing. Download the CoOp split "
            f"'{split_file.name}'{f' from {link}' if link else ''} (linked from CoOp's DATASETS.md) "
            f"into {split_file.parent}."
        )
    if not image_dir.is_dir():
        raise DatasetError(f"{name}: image folder {image_dir} is missing; extract the dataset's images there.")
    try:
        entries = json.loads(split_file.read_text())
        train, test = entries["train"], entries["test"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DatasetError(
            f"{name}: {split_file} is not a split_zhou file ({exc}); expected "
            '{"train": [[path, label, class_name], ...], "val": [...], "test": [...]}.'
        ) from None
    val = entries.get("val") or []
    class_names = _class_names(name, split_file, [*train, *val, *test])
    splits = {}
    for split, rows in (("train", train), ("val", val), ("test", test)):
        if not rows and split == "val":
            continue  # no validation entries: tuning holds out part of train (data.validation)
        paths = [image_dir / row[0] for row in rows]
        missing = next((p for p in paths if not p.is_file()), None)
        if missing is not None:
            raise DatasetError(
                f"{name}: {split_file.name} lists {missing}, which does not exist "
                f"(checked {len(paths)} {split} images). The image folder {image_dir} is incomplete "
                "or belongs to another release: re-extract the dataset archive there."
            )
        splits[split] = FileImages(
            f"{name}/{split}",
            paths,
            [int(row[1]) for row in rows],
            class_names,
            transforms.train if split == "train" else transforms.test,
            cache_key=f"{name}/{split}/{image_dir.resolve()}/{transforms.key}",
        )
    return DatasetSplits(name, splits["train"], splits["test"], class_names, val=splits.get("val"))


def _class_names(name: str, split_file: Path, rows: list) -> list[str]:
    """Class names by label index, taken from the entries (underscores become spaces)."""
    by_label: dict[int, str] = {}
    for row in rows:
        label, cname = int(row[1]), str(row[2]).replace("_", " ")
        if by_label.setdefault(label, cname) != cname:
            raise DatasetError(f"{name}: {split_file} gives label {label} two names: {by_label[label]!r}, {cname!r}")
    expected = list(range(len(by_label)))
    if sorted(by_label) != expected:
        raise DatasetError(f"{name}: {split_file} labels are not 0..{len(by_label) - 1} without gaps")
    return [by_label[i] for i in expected]
