"""The registry of datasets: a name maps to a loader reading one on-disk layout.

`@register_dataset("dtd", folder="dtd", ...)` on a loader function is the one way a
dataset enters the suite; `fedbench datasets` and the reproduce presets read this registry.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # data.base and data.transforms load torch: `fedbench datasets` reads this module without it
    from data.base import DatasetSplits
    from data.transforms import ImageTransforms

Loader = Callable[[Path, "ImageTransforms"], "DatasetSplits"]
# The dataset folder -> the files a load reads besides the images (see `DatasetInfo.data_files`).
DataFiles = Callable[[Path], "tuple[Path, ...]"]


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    folder: str  # under the data root
    layout: str  # one line: what the loader expects to find there
    how_to_get: str  # one paragraph: where the data comes from
    loader: Loader
    protocol: str = "base2novel"  # the paper protocol this dataset is used with
    generated: bool = False  # made by code (the toy world), not read from the data root
    # Facts of the real release, known without the data (presets and dry runs use them):
    num_classes: int | None = None  # classes in the full release
    domains: tuple[str, ...] = ()  # domain names, in the order protocols use them
    test_only: bool = False  # an evaluation set only: its train split is empty (ImageNet variants)
    # The files besides the images that a load reads (split lists, class-name files, label
    # files), given the dataset folder: they decide the numbers as much as the code does, so
    # their content is part of a cell's identity. None: the loader reads no such file.
    data_files: DataFiles | None = None
    # Writes the files a first load would make (the suite's DomainBed splits), so that a cell
    # is named by their content before it runs rather than by their absence.
    prepare: Callable[[Path], None] | None = None

    def path(self, root: Path) -> Path:
        return Path(root) / self.folder


DATASETS: dict[str, DatasetInfo] = {}


def register_dataset(
    name: str,
    *,
    folder: str,
    layout: str,
    how_to_get: str,
    protocol: str = "base2novel",
    generated: bool = False,
    num_classes: int | None = None,
    domains: tuple[str, ...] = (),
    test_only: bool = False,
    data_files: DataFiles | None = None,
    prepare: Callable[[Path], None] | None = None,
) -> Callable[[Loader], Loader]:
    def decorate(loader: Loader) -> Loader:
        if name in DATASETS:
            raise ValueError(f"dataset {name!r} is registered twice")
        DATASETS[name] = DatasetInfo(
            name,
            folder,
            layout,
            how_to_get,
            loader,
            protocol,
            generated,
            num_classes,
            tuple(domains),
            test_only,
            data_files,
            prepare,
        )
        return loader

    return decorate


def default_data_root() -> Path:
    return Path(os.environ.get("FEDBENCH_DATA", Path.home() / ".cache" / "fedbench" / "data"))


def resolve_data_root(data_root: str | None) -> Path:
    """A run's `data_root` option as a folder: the given path, or the default root when empty."""
    return Path(data_root).expanduser() if data_root else default_data_root()


def dataset_info(name: str) -> DatasetInfo:
    from data.base import DatasetError  # lazy: torch, see the imports above

    _import_builtin_loaders()
    if name not in DATASETS:
        raise DatasetError(
            f"unknown dataset {name!r}. Known datasets: {', '.join(sorted(DATASETS))}. "
            "Run `fedbench datasets` to see which are present under the data root."
        )
    return DATASETS[name]


def load_dataset(name: str, root: Path | str, transforms: ImageTransforms) -> DatasetSplits:
    """Load dataset `name` from `root`; a missing folder is a DatasetError saying how to get it."""
    return dataset_info(name).loader(require_dataset(name, root), transforms)


def require_dataset(name: str, root: Path | str) -> Path:
    """The folder of dataset `name` under `root`; a missing one is a DatasetError saying how to get it."""
    from data.base import DatasetError  # lazy: torch, see the imports above

    info = dataset_info(name)
    folder = info.path(Path(root))
    if not info.generated and not folder.is_dir():
        raise DatasetError(
            f"dataset {name!r} not found: looked for the folder {folder}. Expected layout: "
            f"{info.layout}. {info.how_to_get} Point the suite at your data with --data-root DIR "
            "(or FEDBENCH_DATA=DIR)."
        )
    return folder


def _import_builtin_loaders() -> None:
    # Loaders register on import; importing here keeps `data.catalog` free of cycles.
    import data.loaders  # noqa: F401
