"""The feature-shift datasets: DomainNet (10 classes, 6 domains) and Office-Caltech10.

Layout (the FedBN release that FedOTP and pFedMMA reuse):
`DomainNet/<domain>/<class>/*.jpg` with `DomainNet/<domain>_{train,test}.pkl`, and
`office_caltech_10/<domain>/<class>/*` with `office_caltech_10/<domain>_{train,test}.pkl`
(a `split/` subfolder is accepted too). A pkl is a pickle of (paths, labels); paths are
relative to the data root in the release ("DomainNet/clipart/bird/x.jpg"), and labels are
class names (FedBN) or integers (some re-packaged copies).

Labels are derived from each path's class folder through one fixed class -> index map
(class folders sorted by name), never from the pkl's integers: the authors' loader
re-indexed labels apart from the paths and took class order from a Python set. The pkl's
label is only checked against the folder (same name, or one integer per folder).
"""

from __future__ import annotations

import pickle
from pathlib import Path, PurePath

from data.base import DatasetError, DatasetSplits, FileImages
from data.registry import register_dataset
from data.transforms import ImageTransforms

DOMAINNET_DOMAINS = ("clipart", "infograph", "painting", "quickdraw", "real", "sketch")
OFFICE_CALTECH10_DOMAINS = ("amazon", "caltech", "dslr", "webcam")


def _candidates(folder: Path, domain: str, split: str) -> tuple[Path, Path]:
    return folder / f"{domain}_{split}.pkl", folder / "split" / f"{domain}_{split}.pkl"


def split_files(folder: Path, domains: tuple[str, ...]) -> tuple[Path, ...]:
    """Every place a split pickle may be (the first found is read): the cell identity's files."""
    return tuple(p for d in domains for split in ("train", "test") for p in _candidates(folder, d, split))


def _split_file(name: str, folder: Path, domain: str, split: str, layout: str) -> Path:
    for candidate in _candidates(folder, domain, split):
        if candidate.is_file():
            return candidate
    raise DatasetError(
        f"{name}: split file {folder / f'{domain}_{split}.pkl'} is missing. Expected layout: {layout}. "
        "The split pickles come with the FedBN data release (see `fedbench data download " + name + "`)."
    )


def _read_pairs(name: str, path: Path, layout: str) -> tuple[list[str], list]:
    try:
        with open(path, "rb") as handle:
            payload = pickle.load(handle)
        paths, labels = payload
        paths = [str(p) for p in paths]
        labels = [lab.item() if hasattr(lab, "item") else lab for lab in labels]
    except Exception as exc:  # any unpickling/unpacking failure: wrong or damaged file
        raise DatasetError(
            f"{name}: {path} is not a split pickle of (paths, labels) ({exc.__class__.__name__}: {exc}). "
            f"Expected layout: {layout}."
        ) from None
    if len(paths) != len(labels):
        raise DatasetError(f"{name}: {path} holds {len(paths)} paths but {len(labels)} labels.")
    return paths, labels


def _locate(name: str, split_file: Path, folder: Path, domain: str, raw: str, layout: str) -> tuple[Path, str]:
    """Map a pkl path (relative to the data root, to the dataset folder, or absolute from
    another machine) to `folder/<domain>/<class>/<file>`; return it and its class folder."""
    parts = PurePath(raw.replace("\\", "/")).parts
    starts = [i for i, part in enumerate(parts) if part == domain and len(parts) - i >= 3]
    if not starts:
        raise DatasetError(
            f"{name}: {split_file} lists {raw!r}, which is not <...>/{domain}/<class>/<file>. "
            f"Expected layout: {layout}."
        )
    tail = parts[starts[-1] :]
    return folder.joinpath(*tail), tail[1]


def read_domain_dataset(
    name: str, folder: Path, domains: tuple[str, ...], transforms: ImageTransforms, layout: str
) -> DatasetSplits:
    if not folder.is_dir():
        raise DatasetError(f"{name}: folder {folder} is missing. Expected layout: {layout}.")
    rows: dict[str, list[tuple[Path, str, str]]] = {"train": [], "test": []}
    for domain in domains:
        for split in ("train", "test"):
            split_file = _split_file(name, folder, domain, split, layout)
            paths, labels = _read_pairs(name, split_file, layout)
            folder_of_label: dict[object, str] = {}
            for raw, label in zip(paths, labels):
                path, class_folder = _locate(name, split_file, folder, domain, raw, layout)
                if isinstance(label, str):
                    consistent = label == class_folder
                else:
                    consistent = folder_of_label.setdefault(label, class_folder) == class_folder
                if not consistent:
                    raise DatasetError(
                        f"{name}: {split_file} labels {raw!r} as {label!r}, but the image lies in the class "
                        f"folder {class_folder!r}; the split file does not match the images."
                    )
                rows[split].append((path, class_folder, domain))
    class_folders = sorted({c for split_rows in rows.values() for _, c, _ in split_rows})
    index = {c: i for i, c in enumerate(class_folders)}
    class_names = [c.replace("_", " ") for c in class_folders]
    splits = {}
    for split, split_rows in rows.items():
        missing = next((p for p, _, _ in split_rows if not p.is_file()), None)
        if missing is not None:
            raise DatasetError(
                f"{name}: the {split} split lists {missing}, which does not exist (checked {len(split_rows)} "
                f"images). Expected layout: {layout}. Re-extract the domain's images there."
            )
        splits[split] = FileImages(
            f"{name}/{split}",
            [p for p, _, _ in split_rows],
            [index[c] for _, c, _ in split_rows],
            class_names,
            transforms.train if split == "train" else transforms.test,
            domains=[d for _, _, d in split_rows],
            cache_key=f"{name}/{split}/{folder.resolve()}/{transforms.key}",
        )
    return DatasetSplits(name, splits["train"], splits["test"], class_names, domain_names=list(domains))


_DN_LAYOUT = "DomainNet/<domain>/<class>/*.jpg and DomainNet/<domain>_{train,test}.pkl for the domains " + ", ".join(
    DOMAINNET_DOMAINS
)
_OC_LAYOUT = (
    "office_caltech_10/<domain>/<class>/* and office_caltech_10/<domain>_{train,test}.pkl for the domains "
    + ", ".join(OFFICE_CALTECH10_DOMAINS)
)
_HOW = (
    "The 10-class subset and its split pickles come from the FedBN data release "
    "(https://github.com/med-air/FedBN, 'Dataset'); {extra}Run `fedbench data download {name}` for the steps."
)


@register_dataset(
    "domainnet",
    folder="DomainNet",
    layout=_DN_LAYOUT,
    how_to_get=_HOW.format(name="domainnet", extra="images from http://ai.bu.edu/M3SDA/. "),
    protocol="domains",
    num_classes=10,
    domains=DOMAINNET_DOMAINS,
    data_files=lambda folder: split_files(folder, DOMAINNET_DOMAINS),
)
def load_domainnet(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    return read_domain_dataset("domainnet", folder, DOMAINNET_DOMAINS, transforms, _DN_LAYOUT)


@register_dataset(
    "office_caltech10",
    folder="office_caltech_10",
    layout=_OC_LAYOUT,
    how_to_get=_HOW.format(name="office_caltech10", extra=""),
    protocol="domains",
    num_classes=10,
    domains=OFFICE_CALTECH10_DOMAINS,
    data_files=lambda folder: split_files(folder, OFFICE_CALTECH10_DOMAINS),
)
def load_office_caltech10(folder: Path, transforms: ImageTransforms) -> DatasetSplits:
    return read_domain_dataset("office_caltech10", folder, OFFICE_CALTECH10_DOMAINS, transforms, _OC_LAYOUT)
