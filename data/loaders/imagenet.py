"""ImageNet and the four shifted test sets, in CoOp's layout.

Every folder carries its own copy of ImageNet's `classnames.txt` ("<wnid> <class name>"
a line, 1000 lines). ImageNet's label of a class is the index of its wnid in sorted
order (the order of the train folders); the official validation set is the test split.

| name            | folder                  | images                                      | classes |
|-----------------|-------------------------|---------------------------------------------|---------|
| imagenet        | imagenet/               | {train,val}/<wnid>/* (or images/{train,val}) | 1000    |
| imagenet_v2     | imagenetv2/             | imagenetv2-matched-frequency-format-val/<i>/ | 1000    |
| imagenet_sketch | imagenet-sketch/        | images/<wnid>/*                              | 1000    |
| imagenet_a      | imagenet-adversarial/   | imagenet-a/<wnid>/*                          | 200     |
| imagenet_r      | imagenet-rendition/     | imagenet-r/<wnid>/*                          | 200     |

The variants are test sets only (an empty train split; `DatasetInfo.test_only`). Each is
classified over its own class list: V2 and Sketch over the 1000 classes, A and R over the
200 wnids present in their folders, in sorted order. `extra["imagenet_class_ids"]` maps
each class of a split to ImageNet's label, so the 200-class sets stay comparable.
"""

from __future__ import annotations

from pathlib import Path

from data.base import DatasetError, DatasetSplits, FileImages
from data.loaders.image_folders import image_files, subfolders
from data.registry import register_dataset
from data.transforms import ImageTransforms

CLASSNAMES_LINK = "https://drive.google.com/file/d/1-61f_ol79pViBFDG_IDlUQSwoLcn2XXF/view?usp=sharing"
_CLASSNAMES_HOW = (
    f"ImageNet's classnames.txt comes from CoOp's DATASETS.md ({CLASSNAMES_LINK}); every variant folder needs a copy."
)


def read_classnames(name: str, path: Path, layout: str) -> dict[str, str]:
    """wnid -> class name from a classnames.txt, in sorted wnid order."""
    if not path.is_file():
        raise DatasetError(f"{name}: {path} is missing. Expected layout: {layout}. {_CLASSNAMES_HOW}")
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (UnicodeDecodeError, OSError) as exc:
        raise DatasetError(
            f"{name}: {path} cannot be read as text ({exc.__class__.__name__}); the file is corrupt."
        ) from None
    names: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        wnid, _, cname = line.partition(" ")
        if not cname or wnid in names:
            raise DatasetError(
                f"{name}: {path} line {number} ({line!r}) is not '<wnid> <class name>' with a new wnid; "
                f"the file is damaged. Expected layout: {layout}. {_CLASSNAMES_HOW}"
            )
        names[wnid] = cname.strip()
    return {wnid: names[wnid] for wnid in sorted(names)}


def _class_folders(name: str, root: Path, folders: list[str], layout: str) -> list[tuple[list[Path], int]]:
    """(images, label) per class folder; a missing folder is an incomplete dataset."""
    result = []
    for label, sub in enumerate(folders):
        folder = root / sub
        if not folder.is_dir():
            raise DatasetError(
                f"{name}: class folder {folder} is missing ({len(folders)} classes expected from classnames.txt). "
                f"Expected layout: {layout}. The extraction is incomplete: re-extract the archive there."
            )
        images = image_files(folder)
        if not images:
            raise DatasetError(
                f"{name}: class folder {folder} holds no images. Expected layout: {layout}. "
                "The extraction is incomplete: re-extract the archive there."
            )
        result.append((images, label))
    return result


def _files(
    name: str, split: str, per_class: list[tuple[list[Path], int]], class_names: list[str], transform, key: str
) -> FileImages:
    paths = [p for images, _ in per_class for p in images]
    labels = [label for images, label in per_class for _ in images]
    return FileImages(f"{name}/{split}", paths, labels, class_names, transform, cache_key=f"{name}/{split}/{key}")


def _empty(name: str, class_names: list[str], transforms: ImageTransforms) -> FileImages:
    return FileImages(f"{name}/train", [], [], class_names, transforms.train, cache_key=f"{name}/train/empty")


# --- ImageNet -------------------------------------------------------------------------

IMAGENET_LAYOUT = (
    "imagenet/{train,val}/<wnid>/*.JPEG (or imagenet/images/{train,val}/<wnid>/) and imagenet/classnames.txt"
)


@register_dataset(
    "imagenet",
    folder="imagenet",
    layout=IMAGENET_LAYOUT,
    num_classes=1000,
    protocol="imagenet",
    data_files=lambda folder: (folder / "classnames.txt",),
    how_to_get=(
        "ILSVRC-2012 from https://image-net.org (registration), train and val both sorted into wnid folders "
        f"(val: e.g. with the usual valprep.sh). {_CLASSNAMES_HOW} Run `fedbench data download imagenet` for the steps."
    ),
)
def load_imagenet(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    classnames = read_classnames("imagenet", folder / "classnames.txt", IMAGENET_LAYOUT)
    wnids, class_names = list(classnames), list(classnames.values())
    images = folder / "images" if (folder / "images").is_dir() else folder
    splits = {}
    for split, sub in (("train", "train"), ("test", "val")):
        split_dir = images / sub
        if not split_dir.is_dir():
            raise DatasetError(f"imagenet: {split_dir} is missing. Expected layout: {IMAGENET_LAYOUT}.")
        if image_files(split_dir):
            raise DatasetError(
                f"imagenet: {split_dir} holds images directly; sort them into one folder per wnid "
                f"(as the train folder is). Expected layout: {IMAGENET_LAYOUT}."
            )
        extra = sorted(set(subfolders(split_dir)) - set(wnids))
        if extra:
            raise DatasetError(
                f"imagenet: {split_dir / extra[0]} is not a class of classnames.txt ({len(extra)} such folders); "
                "the class list and the images come from different releases."
            )
        per_class = _class_folders("imagenet", split_dir, wnids, IMAGENET_LAYOUT)
        transform = transforms.train if split == "train" else transforms.test
        splits[split] = _files(
            "imagenet", split, per_class, class_names, transform, f"{split_dir.resolve()}/{transforms.key}"
        )
    return DatasetSplits(
        "imagenet",
        splits["train"],
        splits["test"],
        class_names,
        extra={"wnids": wnids, "imagenet_class_ids": list(range(len(wnids)))},
    )


# --- the shifted test sets --------------------------------------------------------------


def _variant(name: str, folder: str, image_dir: str, by_index: bool, all_classes: bool, how: str) -> None:
    """Register a test-only ImageNet variant. `by_index`: class folders are ImageNet label
    indices (ImageNet-V2), else wnids. `all_classes`: every ImageNet class must be present;
    else the classes are the wnid folders present (ImageNet-A/R)."""
    pattern = "<0..999>" if by_index else "<wnid>"
    layout = f"{folder}/{image_dir}/{pattern}/* and {folder}/classnames.txt (a copy of ImageNet's)"

    @register_dataset(
        name,
        folder=folder,
        layout=layout,
        protocol="imagenet",
        test_only=True,
        num_classes=1000 if all_classes else 200,
        data_files=lambda root: (root / "classnames.txt",),
        how_to_get=f"{how} {_CLASSNAMES_HOW}",
    )
    def load(root: Path, transforms: ImageTransforms) -> DatasetSplits:
        classnames = read_classnames(name, root / "classnames.txt", layout)
        imagenet_wnids = list(classnames)
        test_dir = root / image_dir
        if not test_dir.is_dir():
            raise DatasetError(f"{name}: image folder {test_dir} is missing. Expected layout: {layout}.")
        present = subfolders(test_dir)
        if by_index:
            known = [str(i) for i in range(len(imagenet_wnids))]
            stray = sorted(set(present) - set(known))
            class_ids = list(range(len(imagenet_wnids)))
            folders = known
        else:
            stray = sorted(set(present) - set(imagenet_wnids))
            class_ids = list(range(len(imagenet_wnids))) if all_classes else [imagenet_wnids.index(w) for w in present]
            folders = [imagenet_wnids[i] for i in class_ids]
        if stray:
            raise DatasetError(
                f"{name}: {test_dir / stray[0]} is not a class of classnames.txt ({len(stray)} such folders). "
                f"Expected layout: {layout}."
            )
        if not folders:
            raise DatasetError(f"{name}: {test_dir} has no class folders. Expected layout: {layout}.")
        class_names = [classnames[imagenet_wnids[i]] for i in class_ids]
        per_class = _class_folders(name, test_dir, folders, layout)
        test = _files(name, "test", per_class, class_names, transforms.test, f"{test_dir.resolve()}/{transforms.key}")
        return DatasetSplits(
            name,
            _empty(name, class_names, transforms),
            test,
            class_names,
            extra={"wnids": [imagenet_wnids[i] for i in class_ids], "imagenet_class_ids": class_ids},
        )


_variant(
    "imagenet_v2",
    "imagenetv2",
    "imagenetv2-matched-frequency-format-val",
    by_index=True,
    all_classes=True,
    how="ImageNet-V2 matched-frequency (https://huggingface.co/datasets/vaishaal/ImageNetV2), extracted into imagenetv2/.",
)
_variant(
    "imagenet_sketch",
    "imagenet-sketch",
    "images",
    by_index=False,
    all_classes=True,
    how="ImageNet-Sketch (https://github.com/HaohanWang/ImageNet-Sketch): its folder 'sketch' becomes imagenet-sketch/images.",
)
_variant(
    "imagenet_a",
    "imagenet-adversarial",
    "imagenet-a",
    by_index=False,
    all_classes=False,
    how="ImageNet-A (https://people.eecs.berkeley.edu/~hendrycks/imagenet-a.tar), extracted into imagenet-adversarial/.",
)
_variant(
    "imagenet_r",
    "imagenet-rendition",
    "imagenet-r",
    by_index=False,
    all_classes=False,
    how="ImageNet-R (https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar), extracted into imagenet-rendition/.",
)
