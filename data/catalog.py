"""The catalog of datasets: the lookups of the datasets' registry (`data.registry`), one
floor above the loaders it discovers, and where the data lives.

`dataset_info(name)`, `all_datasets()`, `load_dataset` and `require_dataset` discover the
datasets before they read, once: every module of `data.loaders` and the toy world (the
built-ins), then FEDBENCH_DATASETS' modules or .py files and the `fedbench.datasets` entry
points (plugins: docs/writing-a-dataset.md). `fedbench datasets` and the reproduce presets
read the datasets through them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from data.registry import DATASETS, DatasetInfo

# The built-in datasets: every module of the loaders' package, and the toy world's.
BUILTIN = ("data.loaders", "data.toy.datasets")

if TYPE_CHECKING:  # data.base and data.transforms load torch: `fedbench datasets` reads this module without it
    from data.base import DatasetSplits
    from data.transforms import ImageTransforms


def default_data_root() -> Path:
    return Path(os.environ.get("FEDBENCH_DATA", Path.home() / ".cache" / "fedbench" / "data"))


def resolve_data_root(data_root: str | None) -> Path:
    """A run's `data_root` option as a folder: the given path, or the default root when empty."""
    return Path(data_root).expanduser() if data_root else default_data_root()


def dataset_info(name: str) -> DatasetInfo:
    from data.base import DatasetError  # lazy: torch, see the imports above

    if name not in all_datasets():
        raise DatasetError(
            DATASETS.unknown(
                name,
                "Run `fedbench datasets` to see which are present under the data root; a new dataset is a loader "
                "decorated with @register_dataset in a module named by FEDBENCH_DATASETS or by an entry point in "
                "the group 'fedbench.datasets' (docs/writing-a-dataset.md).",
            )
        )
    return DATASETS.members[name]


def load_dataset(name: str, root: Path | str, transforms: ImageTransforms, seed: int | None = None) -> DatasetSplits:
    """Load dataset `name` from `root`; a missing folder is a DatasetError saying how to get it.
    `seed` (a run's) reaches only a dataset that draws its held-out images per seed
    (`DatasetInfo.draws_per_seed`); every other dataset is the same at every seed."""
    info = dataset_info(name)
    if info.draws_per_seed and seed is not None:
        return info.loader(require_dataset(name, root), transforms, seed=seed)
    return info.loader(require_dataset(name, root), transforms)


def require_dataset(name: str, root: Path | str) -> Path:
    """The folder of dataset `name` under `root`; a missing one is a DatasetError saying how to get it."""
    from data.base import DatasetError  # lazy: torch, see the imports above

    info = dataset_info(name)
    folder = info.path(Path(root))
    if not info.generated and not folder.is_dir():
        looked = " or ".join(f"{Path(root) / f} ({source})" for f, source in info.placements)
        raise DatasetError(
            f"dataset {name!r} not found: looked for the folder {looked}. Expected layout: "
            f"{info.layout}. {info.how_to_get} Point the suite at your data with --data-root DIR "
            "(or FEDBENCH_DATA=DIR)."
        )
    return folder


def all_datasets() -> dict[str, DatasetInfo]:
    """Every registered dataset, by name, in registration order: the loaders discovered first
    (they register on import, and load torch: so only when asked)."""
    DATASETS.discover(builtin=BUILTIN)
    return DATASETS.members
