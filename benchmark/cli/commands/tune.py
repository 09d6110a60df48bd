"""`fedbench tune TABLE`: the same hyperparameter search for every method, on validation data."""

from __future__ import annotations

import sys
import time
from pathlib import Path

# benchmark.sweeps.search's defaults, repeated so that `fedbench tune --help` imports no torch
POINTS_PER_DECADE = 2
REFINEMENTS = 2
EXTENSIONS = 2

# Where a part of a table's tuning goes by default: beside its trial runs, never into
# results/TABLE, which holds (and in this repository ships) the table's tuning record.
SUBSET_TUNING = "subset-tuning"


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_quiet_argument

    p = subparsers.add_parser(
        "tune",
        help="tune every method of a table with the same budget on validation data",
        description="For every method of the preset that declares tunable hyperparameters (at least its learning "
        "rate, log-uniform around the paper default): the same search under the same federation schedule. First "
        "a fixed grid over each tuned range (--points-per-decade on a log range, the paper default and both ends "
        "included; every value of a choice), then --refinements trials that bisect the gaps next to the best "
        "point of the smoothed curve, then, only while the choice sits at an end of a log range, up to "
        "--extensions trials one grid step past that end. Each trial runs at every tuning seed (--seeds) and is scored by the mean "
        "over those seeds of the protocol's headline metric (HM for base2novel) on the validation split (the "
        "dataset's own, or a fixed held-out part of train; the test split is never read). The choice: the best "
        "point of the smoothed curve among the points within the measured noise of the best one; a choice at an "
        "end of the values tried or next to a jump beyond the noise is flagged (the table marks it). Studies live in "
        "RESULTS/tuning.db (SQLite): a killed run resumes without repeating finished trials. Writes "
        "RESULTS/tuning.csv (every trial), RESULTS/tuning.md and tuning.png (each method's curve) and "
        "RESULTS/tuned.yaml (the chosen values and flags), which `fedbench reproduce TABLE --tuned` applies.",
    )
    p.add_argument("table", help="preset name or path to a preset YAML")
    _add_search_arguments(p)
    p.add_argument("--methods", nargs="+", help="only these methods (labels or method names)")
    p.add_argument("--datasets", nargs="+", help="only these datasets (the selection averages over the rest)")
    p.add_argument(
        "--set",
        nargs="+",
        metavar="OPTION=VALUE",
        default=[],
        help="run options for every trial of every method, e.g. rounds=5 (recorded in tuned.yaml)",
    )
    p.add_argument("--out", help="folder of the trial run folders (default: runs/TABLE/tuning)")
    p.add_argument(
        "--results",
        help="folder of tuning.db, tuning.csv, tuned.yaml (default: results/TABLE; for a part of the table -- "
        f"--methods, --datasets or --set -- OUT/{SUBSET_TUNING}, so that it never writes over the table's record)",
    )
    p.add_argument("--data-root", help="dataset root (default: $FEDBENCH_DATA or ~/.cache/fedbench/data)")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    add_quiet_argument(p)
    p.set_defaults(func=run)


def _add_search_arguments(p) -> None:
    """The search's budget (the same for every method) and the seeds each trial runs at."""
    p.add_argument(
        "--points-per-decade",
        type=int,
        default=POINTS_PER_DECADE,
        help=f"grid points per decade of a log range, at least (default {POINTS_PER_DECADE})",
    )
    p.add_argument(
        "--refinements",
        type=int,
        default=REFINEMENTS,
        help=f"trials after the grid, bisecting around the best smoothed point (default {REFINEMENTS})",
    )
    p.add_argument(
        "--extensions",
        type=int,
        default=EXTENSIONS,
        help=f"trials past an end of a log range, one grid step each, while the choice sits at that end "
        f"(default {EXTENSIONS})",
    )
    p.add_argument(
        "--seeds",
        nargs="+",
        type=int,
        help="run seeds of every trial, at least 2, none of them a seed of the table; a trial scores the mean "
        "over them and their spread is the measured noise (default: the first four from 101 on that the table "
        "does not list)",
    )


def run(args) -> int:
    from benchmark.cli.args import parse_set
    from benchmark.cli.outputs import check_not_another_tables_folder
    from benchmark.runs.results import check_output_location
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning import run_tuning
    from benchmark.sweeps.tuning_plan import plan_tuning, tuning_seeds

    preset = load_preset(args.table)
    seeds = args.seeds if args.seeds else tuning_seeds(preset)
    overrides = {"out": args.out or str(Path("runs") / preset.name / "tuning")}
    for key in ("data_root", "device"):
        if getattr(args, key):
            overrides[key] = getattr(args, key)
    schedule = parse_set(args.set)
    overrides.update(schedule)
    command = _command_line(args, seeds)
    full_record = Path("results") / preset.name
    subset = subset_flags(args, preset)
    results = (
        Path(args.results) if args.results else full_record if not subset else Path(overrides["out"]) / SUBSET_TUNING
    )
    check_record_is_the_tables(results, preset.name)
    check_not_another_tables_folder(results, preset.name, "the tuning record (tuning.db, tuned.yaml, ...)")
    plan = plan_tuning(
        preset,
        results,
        overrides,
        args.methods,
        args.datasets,
        command,
        seeds,
        args.points_per_decade,
        args.refinements,
        args.extensions,
    )
    if not plan.variants:
        print(f"nothing to tune: no method of {preset.name} declares tunable hyperparameters")
        return 0
    check_before_tuning(plan)  # nothing is written (no tuning.db, no lock) for trials that cannot run
    check_output_location(results, needed_bytes=0, flag="--results")  # its studies are written from the first trial on
    if subset and not args.results:
        print(
            f"a part of {preset.name}'s tuning ({', '.join(subset)}): its studies and choices go to {results}, not "
            f"{full_record} (the table's tuning record); pass --results {full_record} to add them there"
        )
    budgets = ", ".join(f"{v.label} {plan.budget(v)}" for v in plan.variants)
    print(
        f"tuning on the validation split, trials per method: {budgets} ({plan.budget_text}); studies in "
        f"{results / 'tuning.db'}"
    )
    started = time.monotonic()
    tuned = run_tuning(plan)
    seconds = round(time.monotonic() - started)
    return _report(plan, tuned, results, seconds)


def _command_line(args, seeds: list[int]) -> str:
    """The `fedbench tune` call written into the record: every setting of the search spelled out."""
    return " ".join(
        [
            "fedbench tune",
            args.table,
            f"--points-per-decade {args.points_per_decade}",
            f"--refinements {args.refinements}",
            f"--extensions {args.extensions}",
            f"--seeds {' '.join(map(str, seeds))}",
        ]
        + ([f"--methods {' '.join(args.methods)}"] if args.methods else [])
        + ([f"--datasets {' '.join(args.datasets)}"] if args.datasets else [])
        + ([f"--set {' '.join(args.set)}"] if args.set else [])
    )


def _report(plan, tuned: dict, results: Path, seconds: int) -> int:
    """Print each method's choice and the files written; 1 when a method had no trial that finished."""
    for label, values in tuned["values"].items():
        scores = tuned["validation"][label]
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        print(
            f"chosen {label}: {shown} (validation {plan.headline} {scores['tuned']:.2f}; best point "
            f"{scores['best_point']:.2f}; paper default "
            f"{'failed' if scores['paper_default'] is None else format(scores['paper_default'], '.2f')})"
            + (f"; flagged: {tuned['flags'][label]}" if label in tuned.get("flags", {}) else "")
        )
    # The wall time of this process only: several processes may share a study (--methods).
    print(
        f"wrote {results / 'tuning.csv'}, {results / 'tuning.md'}, {results / 'tuning.png'}, {results / 'tuned.yaml'} "
        f"(wall time of this process: {seconds // 60} min {seconds % 60} s)"
    )
    # Every method's budget is spent now: one without values had no trial that finished.
    failed = [v.label for v in plan.variants if v.label not in tuned["values"]]
    if failed:
        print(
            f"fedbench tune: every trial of {', '.join(failed)} failed (see FAILED above): nothing was chosen for "
            f"{'it' if len(failed) == 1 else 'them'}",
            file=sys.stderr,
        )
        return 1
    return 0


def subset_flags(args, preset) -> list[str]:
    """The flags that make this call a part of the table's tuning (methods or datasets left
    out, a method the preset does not list) or the tuning of another table (--set); none when
    it tunes the preset's table as it stands."""
    flags = []
    if args.methods and {v.label for v in preset.select_methods(args.methods)} != {m.label for m in preset.methods}:
        flags.append("--methods")
    if args.datasets and set(args.datasets) != {d["name"] for d in preset.datasets}:
        flags.append("--datasets")
    return flags + (["--set"] if args.set else [])


def check_record_is_the_tables(results: Path, table: str) -> None:
    """A tuned.yaml of another table in `results` is not this tune's to rewrite."""
    import yaml

    from benchmark.config import ConfigError
    from benchmark.sweeps.tuning_studies import TUNED_YAML

    path = results / TUNED_YAML
    recorded = (yaml.safe_load(path.read_text()) or {}).get("table") if path.is_file() else None
    if recorded not in (None, table):
        raise ConfigError(
            f"{path} holds the tuning of table {recorded!r}, not {table!r}: pass another --results folder"
        )


def check_before_tuning(plan) -> None:
    """What `fedbench reproduce` checks before its first cell, for every trial's cells: the
    method, its hyperparameters, the protocol and the backbone (`validate_run`), the data and
    the weights, each a user error (exit 2) naming what is missing and how to get it."""
    from benchmark.backbone_weights import check_weights_reachable
    from benchmark.config import ConfigError
    from benchmark.runs.prechecks import validate_run
    from benchmark.sweeps.sweep import missing_datasets

    cells = [cell for variant in plan.variants for cell in plan.cells(variant, {})]
    for cell in cells:
        validate_run(cell.config, check_data=False)
    missing = missing_datasets(cells)
    if missing:
        raise ConfigError(
            f"cannot tune {plan.preset.name}: its trials need data that is not here ("
            + "; ".join(f"{name}: {how}" for name, how in missing.items())
            + "). Get it, or pass --datasets with the ones you have (`fedbench reproduce "
            f"{plan.preset.name} --dry-run` lists them)"
        )
    for backbone, weights in dict.fromkeys((c.config.backbone, c.config.pretrained) for c in cells):
        check_weights_reachable(backbone, weights)
