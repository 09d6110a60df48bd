"""The DomainBed datasets: PACS, OfficeHome, VLCS, TerraIncognita and the full DomainNet.

Images are `<folder>/<domain>/<class>/*` as the public releases unpack. The folder is
found under FedMVP's name (`pacs`, `officehome`, `domainnet`) or under the one DomainBed's
`scripts/download.py` leaves (`PACS`, `office_home`, `domain_net`); both at once is an error.

Each domain has its own train/val/test split in a CoOp split file ({"train": [[path, label,
class folder], ...], "val": ..., "test": ...}), in one of two places:
- FedMVP's: inside the domain folder, `<folder>/<domain>/split_<tag>_<domain>.json`
  (VLCS: `VLCS/<D>/split_VLCS_<D>.json` beside `<D>/full/`), paths relative to the domain's
  image folder (FedMVP's dataloader/fed_datasets.py);
- the suite's: `<folder>/split_<tag>_<domain>.json`, paths relative to `<folder>`.
A domain with a file in both places is an error naming both. FedMVP's authors never
published theirs, so when a domain has neither the suite makes one: every class's images (sorted by name) shuffled with a seed derived from `SPLIT_SEED`,
the dataset, domain and class, and cut 50 / 20 / 30 % into train / val / test (the
proportions of CoOp's own split maker). The file is written beside the data, a warning
names it, and `fedbench datasets` notes it; delete the file to make it again. A file found
there (the suite's or one supplied by hand) is read as it is and must label the classes as
the folders do.

Classes are the class folders of all domains, sorted by name; labels are shared by all
domains. Every image carries its domain (`split.domains`), and `domain_names` lists them
in a fixed order, so a protocol can hold any one out. DomainNet here is the full
345-class release (`domainnet_full`); the 10-class FedBN subset stays `domainnet`. Its
official train/test lists are not used: as in DomainBed, all five follow one rule over all
of a domain's images, and every domain gets a val part.

Besides the folder names of the spec's layout, the names of the DomainBed release are
accepted (OfficeHome `Art` ... `Real World`, VLCS `Caltech101` ... `VOC2007`).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import random
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import SetupWarning
from benchmark.files import atomic_write
from data.base import DatasetError, DatasetSplits, FileImages
from data.loaders.image_folders import image_files, subfolders
from data.registry import register_dataset
from data.transforms import ImageTransforms

SPLIT_SEED = 1
# DomainBed's list of DomainNet images that duplicate others (its download.py deletes them
# after unpacking; domainbed/misc/domain_net_duplicates.txt, 9,431 lines).
DUPLICATES_URL = (  # the suite leaves them out of every split
    "https://raw.githubusercontent.com/facebookresearch/DomainBed/main/domainbed/misc/domain_net_duplicates.txt"
)
FRACTIONS = (0.5, 0.2)  # train, val; the rest is test
# False inside `splits_in_memory()`: a load makes the missing splits without writing them.
_WRITE_SPLITS = contextvars.ContextVar("fedbench_write_domainbed_splits", default=True)


@contextlib.contextmanager
def splits_in_memory():
    """Loads inside make a domain's missing split in memory (the same split a run writes) and
    write nothing: `fedbench datasets` lists and counts without touching the data root."""
    token = _WRITE_SPLITS.set(False)
    try:
        yield
    finally:
        _WRITE_SPLITS.reset(token)


@dataclass(frozen=True)
class Domain:
    name: str  # as protocols and tables name it
    folders: tuple[str, ...]  # image folder relative to the dataset folder, first found wins
    split_tag: str  # in the split file name


@dataclass(frozen=True)
class DomainBedSpec:
    name: str
    folder: str  # FedMVP's name for the dataset folder
    tag: str
    domains: tuple[Domain, ...]
    num_classes: int
    domainbed_folder: str = ""  # the name DomainBed's download.py gives it, when another
    # A list of images to leave out of every split (paths relative to the folder), read from
    # the dataset folder: DomainBed's, for DomainNet (see DUPLICATES_URL).
    duplicates: str = ""

    def split_file(self, root: Path, domain: Domain) -> Path:
        """The suite's split file of `domain` (paths relative to the dataset folder)."""
        return root / f"split_{self.tag}_{domain.split_tag}.json"

    def fedmvp_split_file(self, root: Path, domain: Domain) -> Path:
        """FedMVP's place for it: inside the domain folder (paths relative to `fedmvp_images`)."""
        return root / domain.folders[0].split("/")[0] / f"split_{self.tag}_{domain.split_tag}.json"

    def fedmvp_images(self, root: Path, domain: Domain) -> Path:
        return root / domain.folders[0]

    def split_files(self, root: Path) -> tuple[Path, ...]:
        """The files a load reads besides the images: per domain FedMVP's split file where there
        is one, else the suite's (made when absent); the duplicate list."""
        files = tuple(
            fedmvp if (fedmvp := self.fedmvp_split_file(root, d)).is_file() else self.split_file(root, d)
            for d in self.domains
        )
        return files + ((root / self.duplicates,) if self.duplicates else ())

    @property
    def layout(self) -> str:
        names = ",".join(d.folders[0] for d in self.domains)
        folders = (
            f"{self.folder}/ (FedMVP) or {self.domainbed_folder}/ (DomainBed)"
            if self.domainbed_folder
            else f"{self.folder}/ (FedMVP, DomainBed)"
        )
        first = self.domains[0].folders[0].split("/")[0]
        return (
            f"{folders} holding {{{names}}}/<class>/* images; per domain a split file "
            f"{first}/split_{self.tag}_<domain>.json (FedMVP's place) or split_{self.tag}_<domain>.json "
            "(the suite's, made when absent)"
            + (f"; {self.duplicates} beside them, if its duplicates are still there" if self.duplicates else "")
        )


def _domains(*rows: tuple) -> tuple[Domain, ...]:
    return tuple(Domain(name, tuple(folders), tag) for name, folders, tag in rows)


DOMAINBED: dict[str, DomainBedSpec] = {
    spec.name: spec
    for spec in (
        DomainBedSpec(
            "pacs",
            "pacs",
            "pacs",
            _domains(
                ("art_painting", ["art_painting"], "artpainting"),
                ("cartoon", ["cartoon"], "cartoon"),
                ("photo", ["photo"], "photo"),
                ("sketch", ["sketch"], "sketch"),
            ),
            7,
            domainbed_folder="PACS",
        ),
        DomainBedSpec(
            "office_home",
            "officehome",
            "officehome",
            _domains(
                ("art", ["art", "Art"], "art"),
                ("clipart", ["clipart", "Clipart"], "clipart"),
                ("product", ["product", "Product"], "product"),
                ("realworld", ["realworld", "Real World"], "realworld"),
            ),
            65,
            domainbed_folder="office_home",
        ),
        DomainBedSpec(
            "vlcs",
            "VLCS",
            "VLCS",
            _domains(
                ("caltech", ["CALTECH/full", "Caltech101"], "CALTECH"),
                ("labelme", ["LABELME/full", "LabelMe"], "LABELME"),
                ("pascal", ["PASCAL/full", "VOC2007"], "PASCAL"),
                ("sun", ["SUN/full", "SUN09"], "SUN"),
            ),
            5,
        ),
        DomainBedSpec(
            "terra_incognita",
            "terra_incognita",
            "terraincognita",
            _domains(*((f"L{n}", [f"location_{n}"], f"location{n}") for n in (38, 43, 46, 100))),
            10,
        ),
        DomainBedSpec(
            "domainnet_full",
            "domainnet",
            "domainnet",
            _domains(*((d, [d], d) for d in ("clipart", "infograph", "painting", "quickdraw", "real", "sketch"))),
            345,
            domainbed_folder="domain_net",
            duplicates="domain_net_duplicates.txt",
        ),
    )
}


def split_counts(n: int) -> tuple[int, int, int]:
    """(train, val, test) image counts of a class with n images: 50 / 20 / 30 % rounded,
    at least one train image, and at least one test image when there are two or more."""
    n_train = max(1, int(n * FRACTIONS[0] + 0.5)) if n else 0
    n_val = int(n * FRACTIONS[1] + 0.5)
    if n >= 2 and n - n_train - n_val < 1:
        n_val = max(0, n - n_train - 1)
        n_train = min(n_train, n - n_val - 1)
    n_val = min(n_val, n - n_train)
    return n_train, n_val, n - n_train - n_val


def read_duplicates(spec: DomainBedSpec, root: Path) -> frozenset[str]:
    """The images to leave out, as paths relative to the dataset folder ('clipart/x/y.jpg'):
    those DomainBed's list names when it is in the folder, else the exact duplicates found by
    content (`content_duplicates`). DomainBed's download.py deletes the listed files and keeps
    no list, so the folder users have holds no list: it must be found all the same."""
    if not spec.duplicates:
        return frozenset()
    path = root / spec.duplicates
    if path.is_file():
        return frozenset(line.strip() for line in path.read_text().splitlines() if line.strip())
    image_dirs, _ = _classes(spec, root)
    return content_duplicates(root, tuple(image_dirs[d.name] for d in spec.domains))


def content_duplicates(root: Path, image_dirs: tuple[Path, ...]) -> frozenset[str]:
    """Every image whose bytes equal an earlier one's (by path, sorted), as paths relative to
    `root`: the first of each set of equal files stays. Only files of equal size are read and
    hashed, so a folder from which DomainBed's download.py deleted the duplicates costs one
    listing with sizes. Kept per process for a folder whose listing has not changed."""
    sizes: dict[int, list[Path]] = {}
    listing = []
    for image_dir in image_dirs:
        for cls in subfolders(image_dir):
            for path in image_files(image_dir / cls):
                stat = path.stat()
                sizes.setdefault(stat.st_size, []).append(path)
                listing.append((str(path), stat.st_size, stat.st_mtime_ns))
    key = hashlib.sha256(repr(sorted(listing)).encode()).hexdigest()
    if key not in _DUPLICATES_FOUND:
        left_out = set()
        for same_size in sizes.values():
            if len(same_size) < 2:
                continue
            first: dict[str, Path] = {}
            for path in sorted(same_size):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                if digest in first:
                    left_out.add(path.relative_to(root).as_posix())
                else:
                    first[digest] = path
        _DUPLICATES_FOUND[key] = frozenset(left_out)
    return _DUPLICATES_FOUND[key]


_DUPLICATES_FOUND: dict[str, frozenset[str]] = {}


def make_domain_split(
    spec: DomainBedSpec,
    root: Path,
    domain: Domain,
    image_dir: Path,
    classes: list[str],
    leave_out: frozenset[str] = frozenset(),
) -> dict:
    """The suite's split of one domain: per class, sorted files (less `leave_out`) shuffled
    with a seed of (SPLIT_SEED, dataset, domain, class), then cut by `split_counts`."""
    split: dict = {"train": [], "val": [], "test": []}
    for label, cls in enumerate(classes):
        if not (image_dir / cls).is_dir():
            continue  # a domain may lack a class
        files = [p.relative_to(root).as_posix() for p in image_files(image_dir / cls)]
        files = [f for f in files if f not in leave_out]
        seed = zlib.crc32(f"{SPLIT_SEED}/{spec.name}/{domain.name}/{cls}".encode())
        random.Random(seed).shuffle(files)
        n_train, n_val, _ = split_counts(len(files))
        for part, chunk in (
            ("train", files[:n_train]),
            ("val", files[n_train : n_train + n_val]),
            ("test", files[n_train + n_val :]),
        ):
            split[part].extend([rel, label, cls] for rel in chunk)
    split["made_by"] = {
        "suite": "fedbench",
        "seed": SPLIT_SEED,
        "fractions": {"train": FRACTIONS[0], "val": FRACTIONS[1]},
        "rule": "per class: files sorted by name, shuffled with a seed of (seed, dataset, domain, class), then cut",
    }
    return split


def _write_split(spec: DomainBedSpec, path: Path, split: dict) -> None:
    try:
        atomic_write(path, json.dumps(split))  # never a half-written split file
    except OSError as exc:
        raise DatasetError(
            f"{spec.name}: no split file {path}, and the suite cannot write the one it makes there "
            f"({exc.__class__.__name__}: {exc}). Make {path.parent} writable for one load, or copy the dataset "
            "to a writable data root."
        ) from None


def _read_split(spec: DomainBedSpec, path: Path, classes: list[str], split: dict | None = None) -> tuple[dict, bool]:
    """(train, val and test rows, whether the suite made the file); "val" may be absent.
    `split`: the file's content already in memory (a split made and not written)."""
    try:
        split = json.loads(path.read_text()) if split is None else split
        parts = {"train": split["train"], "val": split.get("val", []), "test": split["test"]}
        rows = {part: [(str(r[0]), int(r[1]), str(r[2])) for r in entries] for part, entries in parts.items()}
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise DatasetError(
            f"{spec.name}: {path} is not a split file ({exc.__class__.__name__}: {exc}); expected "
            '{"train": [[path, label, class], ...], "val": [...], "test": [...]}. Delete it and the suite makes '
            "a new one."
        ) from None
    for part, entries in rows.items():
        for rel, label, cls in entries:
            if not (0 <= label < len(classes) and classes[label] == cls):
                raise DatasetError(
                    f"{spec.name}: {path} labels {rel!r} as {label} ({cls!r}), but class {label} of the class "
                    f"folders is {classes[label] if 0 <= label < len(classes) else 'none'!r}; the split file does "
                    "not match the images. Delete it and the suite makes a new one."
                )
    return rows, "made_by" in split


def _image_dir(spec: DomainBedSpec, root: Path, domain: Domain) -> Path:
    for candidate in domain.folders:
        if (root / candidate).is_dir():
            return root / candidate
    looked = " or ".join(str(root / f) for f in domain.folders)
    raise DatasetError(
        f"{spec.name}: domain {domain.name!r} is missing: looked for {looked}. Expected layout: {spec.layout}."
    )


def _classes(spec: DomainBedSpec, root: Path) -> tuple[dict[str, Path], list[str]]:
    image_dirs = {d.name: _image_dir(spec, root, d) for d in spec.domains}
    classes = sorted({c for path in image_dirs.values() for c in subfolders(path)})
    if not classes:
        raise DatasetError(f"{spec.name}: no class folders under {root}. Expected layout: {spec.layout}.")
    return image_dirs, classes


@dataclass(frozen=True)
class SplitSource:
    path: Path  # the split file
    base: Path  # its paths are relative to this folder
    whose: str  # "FedMVP" or "the suite"


def split_source(spec: DomainBedSpec, root: Path, domain: Domain) -> SplitSource | None:
    """The split file a load of `domain` reads, None when there is none yet; one in both
    places is a DatasetError naming both."""
    suite, fedmvp = spec.split_file(root, domain), spec.fedmvp_split_file(root, domain)
    if suite.is_file() and fedmvp.is_file():
        raise DatasetError(
            f"{spec.name}: domain {domain.name!r} has two split files: {fedmvp} (FedMVP's place, paths relative "
            f"to {spec.fedmvp_images(root, domain)}) and {suite} (the suite's, paths relative to {root}). Keep one: "
            "move or delete the other."
        )
    if fedmvp.is_file():
        return SplitSource(fedmvp, spec.fedmvp_images(root, domain), "FedMVP")
    return SplitSource(suite, root, "the suite") if suite.is_file() else None


def missing_splits(spec: DomainBedSpec, root: Path) -> dict[str, dict]:
    """{domain: the split the suite makes for it} for every domain without a split file."""
    if all(split_source(spec, root, d) is not None for d in spec.domains):
        return {}
    leave_out = read_duplicates(spec, root)
    image_dirs, classes = _classes(spec, root)
    return {
        domain.name: make_domain_split(spec, root, domain, image_dirs[domain.name], classes, leave_out)
        for domain in spec.domains
        if split_source(spec, root, domain) is None
    }


def write_missing_splits(spec: DomainBedSpec, root: Path) -> None:
    """Make and write the split file of every domain that has none (a warning names them)."""
    made = missing_splits(spec, root)
    if not made:
        return
    written = []
    for domain in spec.domains:
        if domain.name in made:
            path = spec.split_file(root, domain)
            _write_split(spec, path, made[domain.name])
            written.append(str(path))
    warnings.warn(  # a SetupWarning: the CLI prints it as one line, without the code's file and line
        f"{spec.name}: no published split; the suite made one per domain (seed {SPLIT_SEED}, train/val/test "
        f"50/20/30 % per class) and wrote {', '.join(written)}. Later loads reuse these files.",
        SetupWarning,
        stacklevel=4,
    )


def inspect_domainbed(spec: DomainBedSpec, root: Path) -> list[str]:
    """The class names a load would give, every check of a load made but without writing the
    suite's split files (a dry run must not write into the data folder): the duplicate list,
    the domain and class folders, and each split file present against them."""
    leave_out = read_duplicates(spec, root)
    _, classes = _classes(spec, root)
    for domain in spec.domains:
        source = split_source(spec, root, domain)
        if source is None:
            continue  # made from the images on the first load
        split, _ = _read_split(spec, source.path, classes)
        for part, entries in split.items():
            for rel, _, _ in entries:
                path = source.base / rel
                if path.relative_to(root).as_posix() not in leave_out and not path.is_file():
                    raise DatasetError(
                        f"{spec.name}: {source.path.name} lists {path}, which does not exist (the {part} split of "
                        f"{domain.name}). Expected layout: {spec.layout}. Re-extract the images, or delete the "
                        "split file to make a new one from the images present."
                    )
    return [c.replace("_", " ") for c in classes]


def load_domainbed(spec: DomainBedSpec, root: Path, transforms: ImageTransforms) -> DatasetSplits:
    in_memory = {}
    if _WRITE_SPLITS.get():
        write_missing_splits(spec, root)
    else:
        in_memory = missing_splits(spec, root)
    leave_out = read_duplicates(spec, root)
    _, classes = _classes(spec, root)
    rows: dict[str, list[tuple[Path, int, str]]] = {"train": [], "val": [], "test": []}
    notes, fedmvp, removed = [], [], 0
    for domain in spec.domains:
        source = split_source(spec, root, domain)
        if source is None:  # made in memory, not written (splits_in_memory)
            source = SplitSource(spec.split_file(root, domain), root, "the suite")
        split, made_by_suite = _read_split(spec, source.path, classes, in_memory.get(domain.name))
        if made_by_suite:
            notes.append(domain.name)
        if source.whose == "FedMVP":
            fedmvp.append(domain.name)
        for part, entries in split.items():
            for rel, label, _ in entries:
                path = source.base / rel
                if leave_out and path.relative_to(root).as_posix() in leave_out:
                    removed += 1
                    continue
                rows[part].append((path, label, domain.name))
    class_names = [c.replace("_", " ") for c in classes]
    splits = _file_images(spec, root, transforms, rows, class_names)
    said = [f"split made by the suite (seed {SPLIT_SEED}) for {', '.join(notes)}"] if notes else []
    if in_memory:  # `fedbench datasets`: counted from the split a run would make, nothing written
        said = [f"no split yet (a run writes split_{spec.tag}_<domain>.json)"] + [
            n for n in said if not n.startswith("split made by the suite")
        ]
    said += [f"FedMVP's split files for {', '.join(fedmvp)}"] if fedmvp else []
    found_by = spec.duplicates if (root / spec.duplicates).is_file() else "exact duplicates (by content)"
    said += [f"{removed} images of {found_by} left out of the splits"] if removed else []
    extra = {"notes": said} if said else {}
    return DatasetSplits(
        spec.name,
        splits["train"],
        splits["test"],
        class_names,
        domain_names=[d.name for d in spec.domains],
        extra=extra,
        val=splits.get("val") if len(splits.get("val", ())) else None,  # tuning selects on it
    )


def _file_images(
    spec: DomainBedSpec,
    root: Path,
    transforms: ImageTransforms,
    rows: dict[str, list[tuple[Path, int, str]]],
    class_names: list[str],
) -> dict[str, FileImages]:
    """Each split's images (path, label, domain rows), every listed file checked to exist."""
    splits = {}
    for part, part_rows in rows.items():
        missing = next((p for p, _, _ in part_rows if not p.is_file()), None)
        if missing is not None:
            raise DatasetError(
                f"{spec.name}: the {part} split lists {missing}, which does not exist (checked {len(part_rows)} "
                f"images). Expected layout: {spec.layout}. Re-extract the images, or delete the split files to "
                "make new ones from the images present."
            )
        splits[part] = FileImages(
            f"{spec.name}/{part}",
            [p for p, _, _ in part_rows],
            [y for _, y, _ in part_rows],
            class_names,
            transforms.train if part == "train" else transforms.test,
            domains=[d for _, _, d in part_rows],
            cache_key=f"{spec.name}/{part}/{root.resolve()}/{transforms.key}",
        )
    return splits


_HOW = {
    "pacs": "PACS (DomainBed's copy: https://drive.google.com/uc?id=1JFr8f805nMUelQWWmfnJR3y4_SYoN5Pd).",
    "office_home": "OfficeHome (https://www.hemanthdv.org/officeHomeDataset.html; DomainBed's copy: "
    "https://drive.google.com/uc?id=1uY0pj7oFsjMxRwaD3Sxy0jgel0fsYXLC).",
    "vlcs": "VLCS (DomainBed's copy: https://drive.google.com/uc?id=1skwblH1_okBwxWxmRsp9_qi15hyPpxg8).",
    "terra_incognita": "TerraIncognita: Caltech Camera Traps (https://lila.science/datasets/caltech-camera-traps), "
    "locations 38, 43, 46, 100 and 10 classes as DomainBed selects them.",
    "domainnet_full": "DomainNet, all 345 classes (http://ai.bu.edu/M3SDA/), as DomainBed's download.py leaves it "
    f"(duplicates deleted), or unpacked with DomainBed's list of duplicate images ({DUPLICATES_URL}) in the folder "
    "(without it, exact duplicates are found by content).",
}


def _register(spec: DomainBedSpec) -> None:
    @register_dataset(
        spec.name,
        folder=spec.folder,
        layout=spec.layout,
        protocol="domains",
        num_classes=spec.num_classes,
        domains=tuple(d.name for d in spec.domains),
        how_to_get=f"{_HOW[spec.name]} Run `fedbench data download {spec.name}` for the steps.",
        data_files=spec.split_files,
        source="FedMVP" if spec.domainbed_folder else "FedMVP, DomainBed",
        also_at=((spec.domainbed_folder, "DomainBed"),) if spec.domainbed_folder else (),
        # A cell is named by the split it will read: the suite's split is made before naming.
        prepare=lambda root: write_missing_splits(spec, root),
        inspect=lambda root: inspect_domainbed(spec, root),
    )
    def load(root: Path, transforms: ImageTransforms) -> DatasetSplits:
        return load_domainbed(spec, root, transforms)


for _spec in DOMAINBED.values():
    _register(_spec)
