"""`fedbench runs DIR`: the runs under a folder, one row each: state, the settings that
differ between them, the final metrics; `--plot` renders them as `reproduce` renders a table."""

from __future__ import annotations

from benchmark.cli.args import add_margin_argument


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list and compare the runs under a folder (one row per run)",
        description="One row per run under each DIR, or per run folder given (the --out folder of `fedbench run` or `reproduce`): its state "
        "(finished, resumable: a round checkpoint the same command resumes from, failed: with its error), the "
        "settings that differ between the runs, and the final metrics. --plot also renders the finished runs as "
        "`fedbench reproduce` renders a preset: table.md/csv/tex, the paired differences, radar.png and curves.png.",
    )
    p.add_argument(
        "dirs",
        metavar="DIR",
        nargs="*",
        default=["runs"],
        help="folders holding run folders, or run folders themselves (a folder with summary.json); default: runs",
    )
    p.add_argument(
        "--where",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="only the runs matching every KEY=VALUE: state, a run option or a hyperparameter "
        "(method=pfedmma lr=0.01 state=failed); VALUE=a,b matches either (method=promptfl,pfedmma); "
        "run=TEXT matches a part of the run's name",
    )
    p.add_argument(
        "--plot",
        nargs="?",
        const="",
        default=None,
        metavar="OUT",
        help="render the table and figures of the finished runs into OUT (default: DIR/compare, for a run folder "
        "the folder holding it)",
    )
    p.add_argument(
        "--spread",
        action="store_true",
        help="per metric that differs by client: its std across clients and the worst client (value and id)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="peak memory per phase (training, evaluation) in MiB: CPU RSS, and on CUDA allocated and reserved",
    )
    add_margin_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from benchmark.cli.outputs import check_output_folder
    from benchmark.config import ConfigError

    paths = [Path(d) for d in args.dirs]
    where_text = " ".join(map(str, paths))
    nothing = (
        f"no runs under {where_text}: a run folder holds summary.json (finished), a round checkpoint "
        ".NAME.checkpoint.pt (resumable) or NAME.failed.json (failed); pass the --out folder of your runs "
        "or run folders"
    )
    for path in paths:  # said before pandas and torch load (7 s on a busy machine)
        if not path.is_dir():
            raise ConfigError(f"{path} is not a folder; pass the --out folder of your runs (default: runs)")
    if not any(_is_a_run(path) or any(_could_be_a_run(p) for p in path.iterdir()) for path in paths):
        raise ConfigError(nothing)  # said before pandas and torch load (seconds)
    if args.plot:  # where the figures go, checked before anything is read (benchmark/cli/outputs.py)
        check_output_folder(args.plot, "--plot")
    from benchmark.sweeps.compare import render, scan_all, table, where

    entries = scan_all(paths)
    if not entries:
        raise ConfigError(nothing)
    entries = where(entries, args.where)
    if not entries:
        raise ConfigError(f"no run under {where_text} matches --where {' '.join(args.where)}")
    listing = table(entries, args.spread, args.memory)
    with_pandas_options(lambda: print(listing.to_string(index=False)))
    counts = {s: sum(e.state == s for e in entries) for s in ("finished", "resumable", "failed")}
    print(", ".join(f"{n} {s}" for s, n in counts.items() if n))
    if args.plot is not None:
        first = paths[0].parent if _is_a_run(paths[0]) else paths[0]
        out = Path(args.plot) if args.plot else first / "compare"
        files = render(entries, out, f"Runs under {where_text}", args.spread, args.memory, args.margin)
        for path in files.values():
            print(f"wrote {path}")
    return 0


def _is_a_run(path) -> bool:
    """A finished run's own folder (`benchmark.sweeps.compare.is_run_folder`, without importing it)."""
    return (path / "summary.json").is_file()


def _could_be_a_run(path) -> bool:
    """What `benchmark.sweeps.compare.scan` reads as a run, by name alone."""
    name = path.name
    if name.startswith("."):
        return name.endswith(".checkpoint.pt")
    return name.endswith(".failed.json") or (path / "summary.json").is_file()


def with_pandas_options(show) -> None:
    import pandas as pd

    with pd.option_context("display.width", 250, "display.max_columns", None, "display.max_colwidth", 80):
        show()
