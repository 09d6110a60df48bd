"""FGVC-Aircraft in CoOp's layout: the `data/` folder of the official archive, renamed.

`fgvc_aircraft/variants.txt` lists the 100 variants, one a line; a variant's label is
its line index. `images_variant_{train,val,test}.txt` hold "<image id> <variant>" lines
(a variant name may contain spaces and slashes, e.g. "F-16A/B"), and the images are
`fgvc_aircraft/images/<image id>.jpg`. There is no JSON split: these lists are the split.
"""

from __future__ import annotations

from pathlib import Path

from data.base import DatasetError, DatasetSplits, FileImages
from data.registry import register_dataset
from data.transforms import ImageTransforms

LAYOUT = (
    "fgvc_aircraft/images/<id>.jpg, fgvc_aircraft/variants.txt and "
    "fgvc_aircraft/images_variant_{train,val,test}.txt (the archive's data/ folder, renamed)"
)
_HOW = (
    "The official archive fgvc-aircraft-2013b.tar.gz (https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/); "
    "keep its data/ folder, renamed fgvc_aircraft. `fedbench data download fgvc_aircraft` does this with torchvision."
)


def _read_lines(path: Path) -> list[str]:
    if not path.is_file():
        raise DatasetError(
            f"fgvc_aircraft: {path} is missing. Expected layout: {LAYOUT}. "
            "Re-extract the archive's data/ folder (or run `fedbench data download fgvc_aircraft`)."
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:
        raise DatasetError(
            f"fgvc_aircraft: {path} cannot be read as text ({exc.__class__.__name__}); the file is corrupt. "
            f"Expected layout: {LAYOUT}."
        ) from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _read_split(folder: Path, split: str, index: dict[str, int]) -> tuple[list[Path], list[int]]:
    list_file = folder / f"images_variant_{split}.txt"
    paths, labels = [], []
    for number, line in enumerate(_read_lines(list_file), start=1):
        image_id, _, variant = line.partition(" ")
        if variant not in index:
            raise DatasetError(
                f"fgvc_aircraft: {list_file} line {number} ({line!r}) names a variant that is not in "
                f"variants.txt; the list and variants.txt come from different releases. Expected layout: {LAYOUT}."
            )
        paths.append(folder / "images" / f"{image_id}.jpg")
        labels.append(index[variant])
    missing = next((p for p in paths if not p.is_file()), None)
    if missing is not None:
        raise DatasetError(
            f"fgvc_aircraft: {list_file.name} lists {missing}, which does not exist (checked {len(paths)} "
            f"{split} images). Expected layout: {LAYOUT}. Re-extract the archive's images there."
        )
    return paths, labels


def _data_files(folder: Path) -> tuple[Path, ...]:
    return (folder / "variants.txt", *(folder / f"images_variant_{split}.txt" for split in ("train", "val", "test")))


@register_dataset(
    "fgvc_aircraft", folder="fgvc_aircraft", layout=LAYOUT, how_to_get=_HOW, num_classes=100, data_files=_data_files
)
def load_fgvc_aircraft(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    class_names = _read_lines(folder / "variants.txt")
    if len(set(class_names)) != len(class_names):
        raise DatasetError(f"fgvc_aircraft: {folder / 'variants.txt'} lists a variant twice; the file is damaged.")
    index = {name: i for i, name in enumerate(class_names)}
    splits = {}
    for split in ("train", "val", "test"):
        if split == "val" and not (folder / "images_variant_val.txt").is_file():
            continue  # no validation list: tuning holds out part of train (data.validation)
        paths, labels = _read_split(folder, split, index)
        splits[split] = FileImages(
            f"fgvc_aircraft/{split}",
            paths,
            labels,
            class_names,
            transforms.train if split == "train" else transforms.test,
            cache_key=f"fgvc_aircraft/{split}/{folder.resolve()}/{transforms.key}",
        )
    return DatasetSplits("fgvc_aircraft", splits["train"], splits["test"], class_names, val=splits.get("val"))
