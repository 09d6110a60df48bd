"""Class attribute files: per-class descriptor phrases that some methods read (FedMVP).

A file is one JSON object per dataset, `{class display name: [descriptor, ...]}`, the
format of the FedMVP authors' `attributes/<dataset>.json` (MIT licence; never shipped
here). It is looked up as `<attributes dir>/<dataset>.json` (the authors' file name where
it differs: office_home -> officehome.json, ...), the folder being
`--attributes DIR` or `<data root>/attributes`. Class names match keys after `_` -> space,
exactly and case-sensitively; every class must have a key and all classes the same number
of descriptors (a dense [classes x descriptors] layout). Anything else is an
`AttributeFileError` naming the dataset, the missing classes, the file and the two ways to
provide one -- never a silently shortened class list.

Generated datasets (the toy world) register a generator: their file is written from the
world's own class definitions, so methods that need attributes run on a fresh machine.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from benchmark.files import atomic_write
from data.base import DatasetError

# The authors' files (MIT licence, not shipped): `fedbench data download attributes` fetches them.
AUTHORS_REPOSITORY = "https://github.com/mainaksingha01/FedMVP"
AUTHORS_RAW = "https://raw.githubusercontent.com/mainaksingha01/FedMVP/main/attributes/{file}"
AUTHORS_FILES = (
    "caltech101",
    "oxford_flowers",
    "fgvc_aircraft",
    "ucf101",
    "oxford_pets",
    "food101",
    "dtd",
    "stanford_cars",
    "sun397",
    "pacs",
    "officehome",
    "vlcs",
    "terraincognita",
    "domainnet",
    "imagenet",
    "eurosat",
)


class AttributeFileError(DatasetError):
    """An attribute file is missing, malformed or does not cover the dataset's classes."""


@dataclass(frozen=True)
class SentenceFrame:
    """How a dataset's attribute sentences read: "{prefix} {class}, {suffix}which ... {descriptor}".

    `kv_source` says what a method attends over: "sentences" (the classification sentences)
    or "descriptors" (the bare descriptor text; the FedMVP code does this for OfficeHome
    and TerraIncognita)."""

    prefix: str = "a photo of a"
    suffix: str = ""
    kv_source: str = "sentences"


# The FedMVP code's frames, per dataset of this suite; any other dataset reads
# "a photo of a {class}, which ..." (the code defines none for ImageNet; this is the
# natural choice, stated as an assumption). A multi-domain dataset's frame is per domain
# (DOMAIN_FRAMES); the dataset's frame below is the one used where the images at hand span
# several domains (a protocol the authors never run on these datasets).
SENTENCE_FRAMES: dict[str, SentenceFrame] = {
    "oxford_flowers": SentenceFrame(suffix="a type of flower, "),
    "fgvc_aircraft": SentenceFrame(suffix="a type of aircraft, "),
    "oxford_pets": SentenceFrame(suffix="a type of pet, "),
    "food101": SentenceFrame(suffix="a type of food, "),
    "dtd": SentenceFrame(suffix="a type of texture, "),
    "ucf101": SentenceFrame(prefix="a photo of a person doing"),
    "eurosat": SentenceFrame(prefix="a centered satellite photo of"),  # by analogy with CoOp's template
    # The code attends over the bare descriptors for these two (their per-domain prefixes
    # are in DOMAIN_FRAMES).
    "office_home": SentenceFrame(kv_source="descriptors"),
    "terra_incognita": SentenceFrame(kv_source="descriptors"),
}
DEFAULT_FRAME = SentenceFrame()

_DOMAINNET_FRAMES = {
    "clipart": SentenceFrame("a clipart of a"),
    "infograph": SentenceFrame("an infograph of a"),
    "painting": SentenceFrame("a painting of a"),
    "quickdraw": SentenceFrame("a quickdraw image of a"),
    "real": SentenceFrame("a real image of a"),
    "sketch": SentenceFrame("a sketch of a"),
}
# The FedMVP code's per-domain frames (its `data_name` per domain), keyed by this suite's
# dataset and domain names. The frame follows the domain of the images at hand: a client's
# own domain in training, the scored domain in evaluation, so a held-out target domain is
# scored with its own frame ("a sketch of a" for PACS's sketch), as in the authors' code.
# TerraIncognita's four locations all read "a photo of a" (its dataset frame).
DOMAIN_FRAMES: dict[str, dict[str, SentenceFrame]] = {
    "pacs": {
        "art_painting": SentenceFrame("an art painting of a"),
        "cartoon": SentenceFrame("a cartoon of a"),
        "photo": SentenceFrame("a photo of a"),
        "sketch": SentenceFrame("a sketch of a"),
    },
    "office_home": {
        "art": SentenceFrame("an art of a", kv_source="descriptors"),
        "clipart": SentenceFrame("a clipart of a", kv_source="descriptors"),
        "product": SentenceFrame("a product image of a", kv_source="descriptors"),
        "realworld": SentenceFrame("a realworld image of a", kv_source="descriptors"),
    },
    "vlcs": {
        "caltech": SentenceFrame("a high quality photo of a", "as a standalone object, "),
        "labelme": SentenceFrame("a realworld photo of the"),
        "pascal": SentenceFrame("a realworld photo of a"),
        "sun": SentenceFrame("a photo of a", "in diverse scenic environments, "),
    },
    "domainnet_full": _DOMAINNET_FRAMES,
    # The 10-class subset has the same six domains (the authors' file covers its classes).
    "domainnet": _DOMAINNET_FRAMES,
}


def sentence_frames(dataset: str) -> dict[str, Any]:
    """What a run of `dataset` reads its attribute sentences with, as plain data for the
    run's config: the dataset's frame and, for a multi-domain dataset, each domain's."""
    frames: dict[str, Any] = {"dataset": asdict(SENTENCE_FRAMES.get(dataset, DEFAULT_FRAME))}
    if dataset in DOMAIN_FRAMES:
        frames["domains"] = {domain: asdict(frame) for domain, frame in DOMAIN_FRAMES[dataset].items()}
    return frames


# Datasets whose attribute file has another name: the authors' file names, so that
# `fedbench data download attributes` output is found as is.
ATTRIBUTE_FILE_NAMES = {
    "office_home": "officehome",
    "terra_incognita": "terraincognita",
    "domainnet_full": "domainnet",
    "imagenet_v2": "imagenet",
    "imagenet_sketch": "imagenet",
    "imagenet_a": "imagenet",
    "imagenet_r": "imagenet",
}


def attribute_file(folder: Path, dataset: str) -> Path:
    """`<folder>/<file>.json`: the dataset's name, or the authors' name for it."""
    return Path(folder) / f"{ATTRIBUTE_FILE_NAMES.get(dataset, dataset)}.json"


@dataclass(frozen=True)
class ClassAttributes:
    """The descriptors of one dataset's classes, in the dataset's class order."""

    dataset: str
    descriptors: Mapping[str, tuple[str, ...]]  # dataset class name -> its K descriptors
    frame: SentenceFrame
    source: str  # the file they were read from
    sha256: str  # of that file's bytes: recorded with the run's results
    domain_frames: Mapping[str, SentenceFrame] = field(default_factory=dict)  # domain -> its frame

    def frame_for(self, domain: str | None) -> SentenceFrame:
        """The frame of images of `domain` (a domain of the dataset), else the dataset's."""
        return self.domain_frames.get(domain, self.frame) if domain is not None else self.frame

    @property
    def per_class(self) -> int:
        return len(next(iter(self.descriptors.values())))

    def of(self, class_names: Sequence[str]) -> list[tuple[str, ...]]:
        """Descriptors of `class_names`, in that order; an unknown class is an error."""
        missing = [c for c in class_names if c not in self.descriptors]
        if missing:
            raise AttributeFileError(
                f"no attributes for class(es) {_listing(missing)} of dataset {self.dataset!r} in {self.source}"
            )
        return [self.descriptors[c] for c in class_names]


# Generated datasets: name -> function returning {class display name: [descriptors]}.
ATTRIBUTE_GENERATORS: dict[str, Callable[[], dict[str, list[str]]]] = {}


def register_attribute_generator(name: str) -> Callable[[Callable[[], dict]], Callable[[], dict]]:
    def decorate(generate: Callable[[], dict]) -> Callable[[], dict]:
        ATTRIBUTE_GENERATORS[name] = generate
        return generate

    return decorate


def attributes_dir(data_root: Path | str, attributes: str | Path = "") -> Path:
    """`--attributes DIR` if given, else `<data root>/attributes`."""
    return Path(attributes).expanduser() if str(attributes) else Path(data_root) / "attributes"


def display_name(class_name: str) -> str:
    return class_name.replace("_", " ")


def load_class_attributes(
    dataset: str, class_names: Sequence[str], data_root: Path | str, attributes: str | Path = ""
) -> ClassAttributes:
    """The attributes of every class of `dataset`, read from its file (written first for a
    generated dataset when no `--attributes` folder is given)."""
    folder = attributes_dir(data_root, attributes)
    path = attribute_file(folder, dataset)
    if not str(attributes) and dataset in ATTRIBUTE_GENERATORS:
        write_generated(dataset, path)
    if not path.is_file():
        raise AttributeFileError(
            f"no attribute file for dataset {dataset!r}: looked for {path}. Provide one in either of two ways: "
            f"(1) `fedbench data download attributes --data-root {Path(data_root)}` (the FedMVP authors' files, "
            f"MIT licence, into <data root>/attributes/), or (2) pass --attributes DIR with a folder holding "
            f"{path.name}, a JSON object mapping each class name to a list of descriptor strings."
        )
    raw = path.read_bytes()
    table = _parse(raw, path, dataset)
    descriptors = {}
    missing = []
    for name in class_names:
        key = display_name(name)
        if key in table:
            descriptors[name] = tuple(table[key])
        else:
            missing.append(key)
    if missing:
        stray = [k for k in table if k not in {display_name(c) for c in class_names}]
        hint = f" Keys in the file that match no class: {_listing(stray)}." if stray else ""
        raise AttributeFileError(
            f"attribute file {path} does not match dataset {dataset!r}: {len(missing)} of its "
            f"{len(class_names)} classes have no key: {_listing(missing)}.{hint} Keys are class names with '_' "
            f"replaced by spaces, matched exactly. Fix the file, fetch the authors' files with "
            f"`fedbench data download attributes`, or pass --attributes DIR with a matching {path.name}."
        )
    counts = {len(v) for v in descriptors.values()}
    if len(counts) > 1:
        by_count = {n: [c for c, v in descriptors.items() if len(v) == n] for n in sorted(counts)}
        detail = "; ".join(f"{n}: {_listing(cs, 3)}" for n, cs in by_count.items())
        raise AttributeFileError(
            f"attribute file {path}: every class of dataset {dataset!r} needs the same number of descriptors "
            f"(they form a dense classes x descriptors table); found {detail}"
        )
    frame = SENTENCE_FRAMES.get(dataset, DEFAULT_FRAME)
    sha256 = hashlib.sha256(raw).hexdigest()
    return ClassAttributes(dataset, descriptors, frame, str(path), sha256, dict(DOMAIN_FRAMES.get(dataset, {})))


def _parse(raw: bytes, path: Path, dataset: str) -> dict[str, list[str]]:
    try:
        table = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AttributeFileError(
            f"attribute file {path} for dataset {dataset!r} is not valid UTF-8 JSON: {exc}"
        ) from None
    if not isinstance(table, dict) or not table:
        raise AttributeFileError(
            f"attribute file {path} for dataset {dataset!r} must hold a non-empty JSON object "
            f"{{class name: [descriptor, ...]}}, got {type(table).__name__}"
        )
    for key, value in table.items():
        if not isinstance(value, list) or not value or not all(isinstance(d, str) and d for d in value):
            raise AttributeFileError(
                f"attribute file {path}: the value of {key!r} must be a non-empty list of non-empty strings, "
                f"got {value!r}"
            )
    return table


def write_generated(dataset: str, path: Path) -> None:
    """Write a generated dataset's attribute file, unless an identical one is there."""
    text = json.dumps(ATTRIBUTE_GENERATORS[dataset](), indent=1) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text)  # a concurrent reader sees the old file or the new one


def download_authors_files(root: Path, fetch: Callable[[str], bytes], log: Callable[[str], None] = print) -> list[str]:
    """Fetch the authors' files into `<root>/attributes/`; returns the names that failed."""
    folder = Path(root) / "attributes"
    folder.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    offline = False
    for name in AUTHORS_FILES:
        target = folder / f"{name}.json"
        if target.is_file():
            log(f"kept existing {target}")
            continue
        if offline:  # one unreachable host is enough: no 16 timeouts in a row
            failed.append(name)
            continue
        url = AUTHORS_RAW.format(file=f"{name}.json")
        try:
            raw = fetch(url)
            _parse(raw, target, name)
        except Exception as exc:  # network, HTTP or content errors: reported, not raised
            log(f"could not fetch {url}: {exc.__class__.__name__}: {exc}")
            failed.append(name)
            offline = isinstance(exc, OSError)  # URLError, timeouts, refused connections
            continue
        atomic_write(target, raw)  # a reader never sees half a file
        log(f"wrote {target}")
    return failed


def manual_attribute_step(root: Path) -> str:
    return (
        f"Download the JSON files in the attributes/ folder of {AUTHORS_REPOSITORY} (MIT licence; e.g. "
        f"`git clone --depth 1 {AUTHORS_REPOSITORY}.git` on a connected machine) and copy them into "
        f"{Path(root) / 'attributes'}/ (giving e.g. {Path(root) / 'attributes' / 'dtd.json'}). "
        "Or keep them anywhere and pass --attributes DIR to `fedbench run`."
    )


def _listing(items: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(i) for i in list(items)[:limit])
    return shown + (f" ... (+{len(items) - limit} more)" if len(items) > limit else "")
