"""The registry of datasets, as timm's `_registry`: a name maps to a loader reading one
on-disk layout. `@register_dataset("dtd", folder="dtd", ...)` on a loader function is the
one way a dataset enters the suite. The loaders (`data.loaders`, the toy world) import this
module to register; `data.catalog` reads it (and imports the loaders first), so the
registration runs one way and no module imports the one that imports it.
"""

from __future__ import annotations

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
