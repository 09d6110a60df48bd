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
    from benchmark.sweeps.presets import available_presets, load_preset

    for name in available_presets():
        preset = load_preset(name)
        # The runs `reproduce` expands it into (msst targets included), not a product of the keys.
        cells = len(preset.cells())
        print(f"{name:<20} {cells:>5} cells  {preset.title}")
    print("run one with `fedbench reproduce NAME` (--dry-run first: what is done, what data is missing)")
    return 0
