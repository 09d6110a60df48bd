"""The CoOp datasets that come as a split_zhou JSON + images: the seven of pFedMMA's
base-to-novel table, plus Stanford Cars and EuroSAT (FedTPG/FedMVP's tables).

Split paths are relative to the image folder, as in CoOp: OxfordPets `images/`,
Flowers `jpg/`, Caltech101 `101_ObjectCategories/`, SUN397 `SUN397/`, UCF101
`UCF-101-midframes/`, Food101 and DTD `images/`, EuroSAT `2750/`, and Stanford Cars
the dataset folder itself (its entries read `cars_train/00001.jpg`, `cars_test/...`).
"""

from __future__ import annotations

from pathlib import Path

from data.base import DatasetError, DatasetSplits
from data.loaders.split_zhou import read_split_zhou
from data.registry import register_dataset
from data.transforms import ImageTransforms

_COOP = (
    "Get it as described in CoOp's DATASETS.md (images + the split_zhou JSON), or run `fedbench data download {name}`."
)

# name -> (folder under the data root, image folder inside it, split file)
COOP_DATASETS: dict[str, tuple[str, str, str]] = {
    "caltech101": ("caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json"),
    "oxford_pets": ("oxford_pets", "images", "split_zhou_OxfordPets.json"),
    "oxford_flowers": ("oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json"),
    "food101": ("food-101", "images", "split_zhou_Food101.json"),
    "dtd": ("dtd", "images", "split_zhou_DescribableTextures.json"),
    "sun397": ("sun397", "SUN397", "split_zhou_SUN397.json"),
    "ucf101": ("ucf101", "UCF-101-midframes", "split_zhou_UCF101.json"),
    "stanford_cars": ("stanford_cars", "", "split_zhou_StanfordCars.json"),
    "eurosat": ("eurosat", "2750", "split_zhou_EuroSAT.json"),
}
# Where other code bases keep the same folder: pFedMMA's datasets/sun397.py names it `SUN397`
# (images in SUN397/SUN397/, the split beside them), CoOp, FedTPG and FedMVP `sun397`.
COOP_ALSO_AT: dict[str, tuple[tuple[str, str], ...]] = {"sun397": (("SUN397", "pFedMMA"),)}
# Classes in each full release (CoOp's splits).
COOP_NUM_CLASSES = {
    "caltech101": 100,
    "oxford_pets": 37,
    "oxford_flowers": 102,
    "food101": 101,
    "dtd": 47,
    "sun397": 397,
    "ucf101": 101,
    "stanford_cars": 196,
    "eurosat": 10,
}


def coop_layout(name: str) -> str:
    folder, image_dir, split = COOP_DATASETS[name]
    if name == "stanford_cars":
        return f"{folder}/cars_train/*.jpg, {folder}/cars_test/*.jpg and {folder}/{split}"
    return f"{folder}/{image_dir}/... images and {folder}/{split}"


def _read(name: str, root: Path, transforms: ImageTransforms) -> DatasetSplits:
    _, image_dir, split = COOP_DATASETS[name]
    try:
        return read_split_zhou(name, root / split, root / image_dir, transforms)
    except DatasetError as exc:
        raise DatasetError(f"{exc} Expected layout: {coop_layout(name)}.") from None


def load_oxford_flowers(root: Path, transforms: ImageTransforms) -> DatasetSplits:
    """The split_zhou JSON is the source of truth; when `imagelabels.mat` is present,
    each split entry's label is checked against it (label = imagelabels - 1)."""
    split_file = root / COOP_DATASETS["oxford_flowers"][2]
    if not split_file.is_file() and (root / "imagelabels.mat").is_file():
        raise DatasetError(
            f"oxford_flowers: found {root / 'imagelabels.mat'} but not the split file {split_file}. The "
            "suite uses CoOp's split (classes named from cat_to_name.json): download "
            f"'{split_file.name}' (linked from CoOp's DATASETS.md) into {root}. "
            f"Expected layout: {coop_layout('oxford_flowers')}."
        )
    splits = _read("oxford_flowers", root, transforms)
    _check_flower_labels(root / "imagelabels.mat", splits)
    return splits


def _check_flower_labels(mat_file: Path, splits: DatasetSplits) -> None:
    if not mat_file.is_file():
        return
    from scipy.io import loadmat

    try:
        official = [int(y) - 1 for y in loadmat(mat_file)["labels"].ravel()]
    except Exception as exc:  # a damaged .mat is reported, not a scipy trace
        raise DatasetError(f"oxford_flowers: {mat_file} cannot be read ({exc.__class__.__name__}: {exc}).") from None
    for split in (splits.train, splits.test):
        for path, label in zip(split.paths, split.labels):
            stem = path.stem  # image_00001 -> 1-based index into imagelabels
            number = stem.rsplit("_", 1)[-1]
            if not number.isdigit() or not 1 <= int(number) <= len(official):
                continue
            if official[int(number) - 1] != label:
                raise DatasetError(
                    f"oxford_flowers: the split gives {path.name} label {label}, but {mat_file.name} says "
                    f"{official[int(number) - 1]}; the split file and the images come from different releases."
                )


def _data_files(name: str):
    def files(root: Path) -> tuple[Path, ...]:
        split = (root / COOP_DATASETS[name][2],)
        return (*split, root / "imagelabels.mat") if name == "oxford_flowers" else split

    return files


def _coop(name: str) -> None:
    layout = coop_layout(name)
    if name == "oxford_flowers":
        layout += " (imagelabels.mat and cat_to_name.json beside them)"

    @register_dataset(
        name,
        folder=COOP_DATASETS[name][0],
        layout=layout,
        how_to_get=_COOP.format(name=name),
        num_classes=COOP_NUM_CLASSES[name],
        data_files=_data_files(name),
        source="CoOp",
        also_at=COOP_ALSO_AT.get(name, ()),
    )
    def load(root: Path, transforms: ImageTransforms) -> DatasetSplits:
        if name == "oxford_flowers":
            return load_oxford_flowers(root, transforms)
        return _read(name, root, transforms)


for _name in COOP_DATASETS:
    _coop(_name)
