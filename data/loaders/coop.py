"""The seven CoOp datasets of the base-to-novel table, each a split_zhou JSON + images."""

from __future__ import annotations

from pathlib import Path

from data.catalog import register_dataset
from data.loaders.split_zhou import read_split_zhou
from data.transforms import ImageTransforms

_COOP = "Get it as described in CoOp's DATASETS.md (images + the split_zhou JSON), or run `fedbench data download {name}`."


def _coop(name: str, folder: str, image_dir: str, split: str) -> None:
    layout = f"{folder}/{image_dir}/... images and {folder}/{split}"

    @register_dataset(name, folder=folder, layout=layout, how_to_get=_COOP.format(name=name))
    def load(root: Path, transforms: ImageTransforms):
        return read_split_zhou(name, root / split, root / image_dir, transforms)


_coop("caltech101", "caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json")
_coop("oxford_pets", "oxford_pets", "images", "split_zhou_OxfordPets.json")
_coop("oxford_flowers", "oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json")
_coop("food101", "food-101", "images", "split_zhou_Food101.json")
_coop("dtd", "dtd", "images", "split_zhou_DescribableTextures.json")
_coop("sun397", "sun397", "SUN397", "split_zhou_SUN397.json")
_coop("ucf101", "ucf101", "UCF-101-midframes", "split_zhou_UCF101.json")
