"""`fedbench presets`: the tables `fedbench reproduce` can regenerate, one line each."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "presets",
        help="list the presets (tables) `fedbench reproduce` can regenerate",
        description="One line per preset: its name, number of cells (runs, as `reproduce NAME --dry-run` counts "
        "them) and title.",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from benchmark.cli import listing

    # The runs `reproduce` expands each into (msst targets included), not a product of the keys;
    # read without torch when nothing changed since the last listing (benchmark/cli/listing.py).
    for name, cells, title in listing.presets():
        print(f"{name:<20} {cells:>5} cells  {title}")
    print("run one with `fedbench reproduce NAME` (--dry-run first: what is done, what data is missing)")
    return 0
