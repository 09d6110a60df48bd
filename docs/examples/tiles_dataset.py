"""`tiles`: an ImageFolder-style dataset, one folder per class under train/ and test/.

Register it with `FEDBENCH_DATASETS=tiles_dataset.py` (or a `fedbench.datasets` entry point);
`python tiles_dataset.py DATA_ROOT` writes a small one of generated images to try it.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from data.base import DatasetError, DatasetSplits, FileImages
from data.loaders.image_folders import image_files, subfolders
from data.registry import register_dataset
from data.transforms import ImageTransforms

LAYOUT = "tiles/{train,test}/<class name>/<image>.png: the same class folders in both splits"
COLOURS = {"red": (200, 40, 40), "green": (40, 160, 60), "blue": (40, 70, 200), "yellow": (220, 200, 40)}


@register_dataset(
    "tiles",
    folder="tiles",
    layout=LAYOUT,
    how_to_get="Write it with `python tiles_dataset.py DATA_ROOT` (generated images).",
    protocol="dirichlet",
    num_classes=len(COLOURS),
)
def load_tiles(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    class_names = subfolders(folder / "train")  # sorted: the class order is the folders' names
    splits = {}
    for split in ("train", "test"):
        if not (folder / split).is_dir() or subfolders(folder / split) != class_names:
            raise DatasetError(f"tiles: {folder / split} must hold the class folders of train/. Layout: {LAYOUT}")
        files = [(path, label) for label, name in enumerate(class_names) for path in image_files(folder / split / name)]
        splits[split] = FileImages(
            f"tiles/{split}",
            [path for path, _ in files],
            [label for _, label in files],
            class_names,
            transforms.train if split == "train" else transforms.test,
            cache_key=f"tiles/{split}/{folder.resolve()}/{transforms.key}",
        )
    return DatasetSplits("tiles", splits["train"], splits["test"], class_names)


def make_images(root: Path, per_class: dict[str, int] | None = None, size: int = 32) -> Path:
    """Write root/tiles: each class a colour, each image that colour with noise."""
    from PIL import Image

    rng = random.Random(0)
    for split, count in (per_class or {"train": 8, "test": 4}).items():
        for name, colour in COLOURS.items():
            (root / "tiles" / split / name).mkdir(parents=True, exist_ok=True)
            for i in range(count):
                pixels = [tuple(min(255, max(0, c + rng.randint(-30, 30))) for c in colour) for _ in range(size * size)]
                image = Image.new("RGB", (size, size))
                image.putdata(pixels)
                image.save(root / "tiles" / split / name / f"{i:03d}.png")
    return root / "tiles"


if __name__ == "__main__":
    print(f"wrote {make_images(Path(sys.argv[1]))}")
