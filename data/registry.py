"""The datasets' registry and decorator, as timm's `_registry`: a name maps to a loader
reading one on-disk layout. `@register_dataset("dtd", folder="dtd", ...)` on a loader
function is the one way a dataset enters the suite, built-in or plugin: it adds a
`DatasetInfo` to `DATASETS`, the datasets' `benchmark.plugins.Registry` (the one mechanism
of methods, protocols and datasets). The loaders import this module; `data.catalog`, one
floor up, discovers them (every module of `data.loaders`, the toy world, the modules or .py
files named by FEDBENCH_DATASETS, the `fedbench.datasets` entry points) and answers the
lookups, so registration runs one way and no module imports the one that imports it.
docs/writing-a-dataset.md is the author's guide.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from benchmark.plugins import Registry

if TYPE_CHECKING:  # data.base and data.transforms load torch: `fedbench datasets` reads this module without it
    from data.base import DatasetSplits
    from data.transforms import ImageTransforms

Loader = Callable[[Path, "ImageTransforms"], "DatasetSplits"]
# A place under the data root where a code base leaves a dataset: (folder, whose layout it is).
Placement = tuple[str, str]
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
    # For a loader that writes on its first load (`prepare`): the class names a load would
    # give, with every check of a load but nothing written (what a dry run calls).
    inspect: Callable[[Path], list[str]] | None = None
    # Whose layout `folder` is, and the other places reference code bases leave the same
    # data (pFedMMA's `cifar-10/cifar-10-batches-py`, DomainBed's `PACS`): each is looked in.
    source: str = "the suite"
    also_at: tuple[Placement, ...] = ()
    # A generated dataset whose held-out images are drawn anew for each run seed (the toy
    # world's version 7): its loader takes `seed=`, and a rerun's seed varies the test draw too.
    draws_per_seed: bool = False

    @property
    def placements(self) -> tuple[Placement, ...]:
        return ((self.folder, self.source), *self.also_at)

    def found(self, root: Path) -> list[Placement]:
        """The placements present under `root` (see `found_placements`)."""
        return found_placements(Path(root), self.placements)

    def path(self, root: Path) -> Path:
        """The dataset's folder under `root`: the one placement found, or the suite's own
        folder when none is. Two found at once is a DatasetError naming both: the suite
        will not guess which copy a run should read."""
        found = self.found(root)
        if len(found) > 1:
            from data.base import DatasetError  # lazy: torch, see the imports above

            raise DatasetError(two_layouts_message(self.name, Path(root), found))
        return Path(root) / (found[0][0] if found else self.folder)

    def layout_found(self, root: Path) -> str:
        """'<folder> (<whose layout>)' of the placement found, '' when none or two."""
        found = self.found(root)
        return f"{found[0][0]} ({found[0][1]} layout)" if len(found) == 1 else ""


def found_placements(root: Path, placements: tuple[Placement, ...] | list) -> list[Placement]:
    """The placements whose folder exists under `root`, in order. Two names of one folder
    (`sun397` and `SUN397` on a case-insensitive file system) count once."""
    found: list[Placement] = []
    for folder, source in placements:
        path = root / folder
        if path.is_dir() and not any(os.path.samefile(path, root / other) for other, _ in found):
            found.append((folder, source))
    return found


def two_layouts_message(name: str, root: Path, found: list[Placement]) -> str:
    places = " and ".join(f"{root / folder} ({source} layout)" for folder, source in found)
    return (
        f"dataset {name!r} is in two places at once: {places}. The suite reads one copy; move or "
        "rename all but the one the runs should read."
    )


DATASETS: Registry[DatasetInfo] = Registry("dataset", group="fedbench.datasets", variable="FEDBENCH_DATASETS")


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
    inspect: Callable[[Path], list[str]] | None = None,
    source: str = "the suite",
    also_at: tuple[Placement, ...] = (),
    draws_per_seed: bool = False,
) -> Callable[[Loader], Loader]:
    """Register `loader` (data folder, transforms -> DatasetSplits) as dataset `name`: its
    `folder` under the data root, the `layout` it expects there (one line) and `how_to_get`
    it (one paragraph), both shown when the folder is missing; the rest is optional (see
    `DatasetInfo`)."""

    def decorate(loader: Loader) -> Loader:
        if name in DATASETS.members:
            raise ValueError(DATASETS.taken(name))
        for field_name, text in (("folder", folder), ("layout", layout), ("how_to_get", how_to_get)):
            if not (isinstance(text, str) and text.strip()):
                raise ValueError(f"@register_dataset({name!r}): {field_name} must be a non-empty string, got {text!r}")
        info = DatasetInfo(
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
            _data_files(name, data_files),
            prepare,
            inspect,
            source,
            tuple(also_at),
            draws_per_seed,
        )
        DATASETS.add(name, info)
        return loader

    return decorate


def _data_files(name: str, data_files) -> DataFiles | None:
    """`data_files` as `DatasetInfo` holds it: a callable (folder -> paths) as given; a tuple
    or list of paths relative to the dataset folder (`("labels.csv",)`) as one that joins them
    to the folder; anything else a ValueError at registration, not a TypeError in a run."""
    if data_files is None or callable(data_files):
        return data_files
    if isinstance(data_files, (tuple, list)) and all(isinstance(p, (str, Path)) for p in data_files):
        bad = [str(p) for p in data_files if Path(p).is_absolute() or ".." in Path(p).parts or not str(p).strip()]
        if not bad:
            return functools.partial(_files_in, tuple(Path(p) for p in data_files))
        raise ValueError(
            f"@register_dataset({name!r}): data_files must name files inside the dataset folder, relative to it; "
            f"got {', '.join(map(repr, bad))}"
        )
    raise ValueError(
        f"@register_dataset({name!r}): data_files must be a tuple of file names relative to the dataset folder "
        f'(data_files=("labels.csv",)) or a function of the folder giving their paths; got {data_files!r}'
    )


def _files_in(names: tuple[Path, ...], folder: Path) -> tuple[Path, ...]:
    return tuple(folder / name for name in names)
