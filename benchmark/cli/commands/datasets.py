"""`fedbench datasets` (what is under the data root) and `fedbench data download NAME`."""

from __future__ import annotations

import argparse
from pathlib import Path

# Dataset modules import torch: loaded when a command runs, never for `fedbench --help`.

_MESSAGE_WIDTH = 110


def add_parser(subparsers) -> None:
    listing = subparsers.add_parser(
        "datasets",
        help="list every dataset and whether it is found under the data root",
        description="Table of every registered dataset: found / missing / incomplete under the data root, "
        "with image and class counts and where it was found (the suite's, CoOp's, pFedMMA's, DomainBed's or "
        "FedMVP's layout).",
    )
    listing.add_argument(
        "--data-root", type=Path, default=None, help="data root (default: $FEDBENCH_DATA or ~/.cache/fedbench/data)"
    )
    listing.set_defaults(func=run_datasets)

    data = subparsers.add_parser("data", help="fetch datasets", description="Dataset management.")
    data.set_defaults(func=lambda args: _usage(data))
    actions = data.add_subparsers(dest="data_command", metavar="{download}")
    download = actions.add_parser(
        "download",
        help="download a dataset into the data root (or print the manual steps)",
        description="Download with torchvision where it can (CIFAR, Caltech101, OxfordPets, Flowers102, Food101, "
        "DTD, SUN397, EuroSAT, FGVC-Aircraft) into the suite's layout, then print the manual steps still needed "
        "(CoOp split files, UCF101 mid-frames, Stanford Cars, ImageNet and its variants, the DomainNet and "
        "Office-Caltech10 releases, the DomainBed datasets). `attributes` fetches the FedMVP authors' class attribute "
        "files (MIT licence) into <data root>/attributes/, or prints the manual step.",
    )
    download.add_argument(
        "name", type=_downloadable, help="dataset name (one `fedbench datasets` lists, not generated), or 'attributes'"
    )
    download.add_argument(
        "--data-root", type=Path, default=None, help="data root (default: $FEDBENCH_DATA or ~/.cache/fedbench/data)"
    )
    download.set_defaults(func=run_download)


def _downloadable(name: str) -> str:
    # Checked when parsed, not when the parser is built: the catalog imports torch.
    if name not in _dataset_names() + ["attributes"]:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r} (choose from {', '.join(_dataset_names())}, attributes)"
        )
    return name


def _dataset_names() -> list[str]:
    from benchmark.cli import listing

    return [name for name, entry in listing.datasets().items() if not entry["generated"]]


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _shorten(text: str, width: int = _MESSAGE_WIDTH) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _set_note(row: dict, text: str) -> None:
    """The row's note, cut to the table's width; the whole of a cut note is kept for the lines
    under the table (what to do about an incomplete dataset is mostly in its last words)."""
    row["folder / note"] = _shorten(text)
    if row["folder / note"] != " ".join(str(text).split()):
        row[_FULL_NOTE] = " ".join(str(text).split())


_FULL_NOTE = "_full_note"  # not a column: printed under the table when the column had to cut it


def listed_status(name: str, entry: dict, root: Path) -> dict:
    """A row of the table from the listing alone (benchmark/cli/listing.py: no torch) for a
    generated or missing dataset, or one found in two places; a dataset whose folder exists
    once is loaded (dataset_status)."""
    from data.registry import found_placements, two_layouts_message

    found = found_placements(Path(root), [tuple(p) for p in entry.get("placements") or [(entry["folder"], "")]])
    row = {
        "dataset": name,
        "protocol": entry["protocol"],
        "status": "",
        "classes": "",
        "train": "",
        "test": "",
        "domains": "",
        "folder / note": str(Path(root) / entry["folder"]),
    }
    if entry["generated"]:
        row.update(status="generated", **{"folder / note": "made by code, not read from the data root"})
    elif not found:
        row["status"] = "missing"
        if len(entry.get("placements") or ()) > 1:
            row["folder / note"] = "looked for " + " or ".join(
                f"{folder} ({who})" for folder, who in entry["placements"]
            )
    elif len(found) > 1:
        message = two_layouts_message(name, Path(root), found).replace(f"{root}/", "")
        row["status"] = "incomplete"
        _set_note(row, message)
    else:
        folder, who = found[0]
        row["folder / note"] = f"{folder} ({who} layout)" if who else folder
    return row


def dataset_status(name: str, root: Path) -> dict:
    """One row of the table: status found / missing / incomplete / generated, with counts."""
    from benchmark.cli.listing import listing_entry
    from data.base import DatasetError
    from data.catalog import all_datasets, load_dataset
    from data.loaders.domainbed import splits_in_memory
    from data.transforms import clip_transforms

    info = all_datasets()[name]
    row = listed_status(name, listing_entry(info), root)
    if row["status"]:  # generated or missing: nothing to load
        return row
    try:
        with splits_in_memory():  # a listing writes nothing into the data root (DomainBed's splits)
            splits = load_dataset(name, root, clip_transforms(224, augment=False))
    except DatasetError as exc:
        message = str(exc).replace(f"{root}/", "")  # paths relative to the data root keep the note short
        row["status"] = "incomplete"
        _set_note(row, message)
        return row
    row.update(
        status="found",
        classes=len(splits.class_names),
        train="-" if info.test_only else len(splits.train),
        test=len(splits.test),
        domains=len(splits.domain_names) if splits.domain_names else "",
    )
    notes = [row["folder / note"]]  # where it was found, whose layout
    if info.num_classes and len(splits.class_names) != info.num_classes:
        notes.append(f"{len(splits.class_names)} of the release's {info.num_classes} classes")
    notes += splits.extra.get("notes", [])
    if notes:
        _set_note(row, "; ".join(notes))
    return row


def run_datasets(args: argparse.Namespace) -> int:
    from benchmark.cli import listing
    from data.catalog import default_data_root

    root = Path(args.data_root or default_data_root()).expanduser()
    if args.data_root is not None and not root.is_dir():
        from benchmark.errors import UserError

        # A mistyped root would list every dataset as missing and exit 0: say what is wrong.
        raise UserError(
            f"--data-root {root}: {'is not a folder' if root.exists() else 'does not exist'}; pass the folder "
            "holding your datasets (dtd/, PACS/, ...), or leave --data-root out for $FEDBENCH_DATA or "
            "~/.cache/fedbench/data"
        )
    rows = []
    for name, entry in listing.datasets().items():  # without torch until a dataset's folder exists
        row = listed_status(name, entry, root)
        rows.append(row if row["status"] else dataset_status(name, root))
    print(f"data root: {root}" + ("" if root.is_dir() else " (does not exist yet: nothing downloaded there)"))
    cut = {row["dataset"]: row.pop(_FULL_NOTE) for row in rows if _FULL_NOTE in row}
    print(text_table(rows))
    if cut:
        print("\nnotes cut short above, in full (paths under the data root):")
        for name, note in cut.items():
            print(f"  {name}: {note}")
    plugins = {name: entry["origin"] for name, entry in listing.datasets().items() if entry["origin"] != "fedbench"}
    if plugins:
        print("\nfrom plugins (FEDBENCH_DATASETS, fedbench.datasets entry points):")
        for name, origin in plugins.items():
            print(f"  {name}: {origin}")
    broken = listing.dataset_plugin_errors()
    if broken:
        print("\ndataset plugins that failed to load:")
        for label, why in broken.items():
            print(f"  {label}: {why}")
    missing = [r["dataset"] for r in rows if r["status"] in ("missing", "incomplete")]
    if missing:
        print(f"\n{len(missing)} not usable; `fedbench data download NAME` fetches or explains how to get one.")
    return 0


def text_table(rows: list[dict]) -> str:
    """`rows` as right-aligned columns under their keys (pandas' to_string look, without pandas)."""
    columns = list(rows[0]) if rows else []
    cells = [[str(c) for c in columns]] + [[str(row[c]) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join(" ".join(value.rjust(width) for value, width in zip(line, widths)) for line in cells)


def run_download(args: argparse.Namespace) -> int:
    """0 when the dataset loads afterwards; 1 when manual steps remain (printed) or the download failed."""
    from data.catalog import default_data_root
    from data.download import TORCHVISION, manual_steps, torchvision_download, torchvision_manual_steps

    name = args.name
    root = Path(args.data_root or default_data_root()).expanduser()
    if name == "attributes":
        return download_attributes(root)
    status = dataset_status(name, root)
    if status["status"] == "found":
        print(f"{name} is already complete under {root}: {status['train']} train / {status['test']} test images.")
        return 0
    steps = manual_steps(name, root)
    if name in TORCHVISION:
        try:
            torchvision_download(name, root)
        except Exception as exc:  # network or archive failures: say what happened and what to do instead
            print(
                f"download of {name} failed: {exc.__class__.__name__}: {exc} (no network here?); "
                "nothing was left behind. It can be done by hand."
            )
            steps = torchvision_manual_steps(name, root) + steps
            _print_steps(name, root, steps)
            return 1
    if steps:
        _print_steps(name, root, steps)
    status = dataset_status(name, root)
    if status["status"] == "found":
        print(f"{name} is ready: {status['train']} train / {status['test']} test images.")
        return 0
    return 1


def _print_steps(name: str, root: Path, steps: list[str]) -> None:
    print(f"To complete {name} under {root}, do by hand:")
    for number, step in enumerate(steps, start=1):
        print(f"  {number}. {step}")
    print(f"Then check with `fedbench datasets --data-root {root}`.")


def download_attributes(root: Path, fetch=None) -> int:
    """0 when every authors' attribute file is under <root>/attributes; 1 (with the manual step
    printed) when any could not be fetched, e.g. without network access."""
    from data.attributes import download_authors_files, manual_attribute_step

    failed = download_authors_files(root, fetch or _http_get)
    if not failed:
        print(f"attribute files are in {root / 'attributes'}")
        return 0
    print(f"{len(failed)} attribute file(s) could not be fetched ({', '.join(failed)}). Do by hand:")
    print(f"  1. {manual_attribute_step(root)}")
    return 1


def _http_get(url: str) -> bytes:
    from urllib.request import urlopen

    with urlopen(url, timeout=20) as response:
        return response.read()
