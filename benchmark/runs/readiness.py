"""Whether a run would start: the files it reads, checked before it runs.

A dataset folder that exists is not yet data a run can read: its split file may be missing,
its images incomplete, its classes fewer than the release's. `check_dataset` does what a
load does (without writing anything: DomainBed's splits are checked, not made) and says
what is wrong; `check_attributes` reads the class attribute file of a method that needs
one (FedMVP) against the dataset's classes. The dry run of `fedbench reproduce` says a
dataset is "present" only when both pass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from benchmark.registry import get_method
from data.attributes import AttributeFileError, load_class_attributes
from data.base import DatasetError
from data.catalog import dataset_info, load_dataset, resolve_data_root
from data.fewshot import images_per_class
from data.transforms import clip_transforms


@dataclass(frozen=True)
class DataCheck:
    """What a run would find of one dataset under one data root."""

    absent: bool = False  # no folder at any of its placements
    why: str = ""  # why a run on it cannot start (empty when it can)
    partial: str = ""  # fewer classes than the release: "6 of the release's 100 classes"
    class_names: list[str] = field(default_factory=list)
    num_train: int = 0  # images, when the dataset was loaded (0: not known)
    num_test: int = 0

    @property
    def ready(self) -> bool:
        return not self.why


def check_dataset(name: str, root: Path) -> DataCheck:
    """Load (or inspect) dataset `name` under `root` as a run would, without writing."""
    info = dataset_info(name)
    if info.generated:
        return DataCheck()
    try:
        folder = info.path(root)
    except DatasetError as exc:  # two placements at once
        return DataCheck(why=str(exc))
    if not folder.is_dir():
        looked = " or ".join(str(Path(root) / f) for f, _ in info.placements)
        return DataCheck(absent=True, why=f"expected {looked} ({info.layout}). {info.how_to_get}")
    num_train = num_test = 0
    try:
        if info.inspect is not None:
            class_names = info.inspect(folder)
        else:
            # the size does not matter: no image is decoded
            splits = load_dataset(name, root, clip_transforms(224, augment=False))
            class_names, num_train, num_test = splits.class_names, len(splits.train), len(splits.test)
    except DatasetError as exc:
        return DataCheck(why=str(exc))
    partial = ""
    if info.num_classes and len(class_names) < info.num_classes:
        partial = f"{len(class_names)} of the release's {info.num_classes} classes"
    return DataCheck(partial=partial, class_names=list(class_names), num_train=num_train, num_test=num_test)


def check_attributes(config, class_names: list[str]) -> str:
    """Why the class attributes of `config`'s method cannot be read for these classes ('' when
    they can, or when the method reads none)."""
    try:
        reads = get_method(config.method).uses_class_attributes
    except Exception:  # an unknown method is reported by validate_run
        return ""
    if not reads or not class_names:
        return ""
    try:
        load_class_attributes(config.datasets[0], class_names, resolve_data_root(config.data_root), config.attributes)
    except AttributeFileError as exc:
        return str(exc)
    return ""


def fit_shots_to_data(config):
    """(`config` with the shots its data can give, warnings) for one `fedbench run`, before the
    run is named. A dataset whose every class has fewer training images than `--shots` (a CoOp
    folder holding 8 per class, run at the default 16) trains on all of them: the same
    images as `--shots N` with N its largest class, so the run is named and recorded N-shot
    instead of claiming 16 (the computation is equal: a class with no more images than the
    shots is taken whole either way). A dataset holding fewer classes than its release is
    said too. The suite's generated datasets are made with enough images and are not loaded
    here (their runs keep their names)."""
    root = resolve_data_root(config.data_root)
    notes, largest = [], 0
    for name in dict.fromkeys(config.datasets + config.test_datasets):
        info = dataset_info(name)
        if info.generated:
            return config, []  # a mixture with a generated dataset keeps the shots asked for
        splits = load_dataset(name, root, clip_transforms(224, augment=False))  # no image is decoded
        if info.num_classes and len(splits.class_names) < info.num_classes:
            notes.append(
                f"{name} holds {len(splits.class_names)} of the release's {info.num_classes} classes: its numbers "
                "are not the paper's dataset (`fedbench datasets` says what is found)"
            )
        if name in config.datasets and not info.test_only:
            counts = images_per_class(splits.train.labels, range(len(splits.class_names)))
            largest = max([largest, *counts.values()])
    if config.shots <= 0 or not largest or largest >= config.shots:
        return config, notes
    notes.append(
        f"--shots {config.shots}, but no class of {'+'.join(config.datasets)} has more than {largest} training "
        f"images: the run trains on all of them and is named and recorded {largest}-shot (pass --shots {largest} "
        "to say so, or add images)"
    )
    return dataclasses.replace(config, shots=largest), notes
