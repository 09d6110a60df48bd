"""`fedbench reproduce TABLE`: regenerate a paper table (resumable), or `--dry-run` to plan."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from benchmark.cli.args import add_margin_argument, add_quiet_argument, parse_set, positive_int
from benchmark.sweeps.executors import (
    DEFAULT,
    EXECUTORS,
    add_executor_arguments,
    executor_from_args,
    executor_help,
    extras_note,
)
from benchmark.sweeps.presets import Preset, available_presets


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "reproduce",
        help="regenerate a table of the paper from its preset (resumable)",
        description="Expands the preset into runs (datasets x methods x seeds x grid), skips runs whose "
        "results already exist for the same resolved config, runs the rest, and renders the table "
        "(Markdown, CSV, LaTeX, paper comparison, radar plot, per-round curves) into --results. "
        f"Presets: {', '.join(available_presets())}; or a path to your own preset YAML.",
    )
    p.add_argument("table", help="preset name or path to a preset YAML")
    p.add_argument("--seeds", type=int, nargs="+", help="only these seeds")
    p.add_argument("--datasets", nargs="+", help="only these datasets")
    p.add_argument("--methods", nargs="+", help="only these methods (a registered method not in the preset is added)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="plan only: the cells per dataset, which are done, the data that is missing or not ready (split "
        "files, class counts, attribute files) with how to get it, and the table's estimated FLOPs and GPU-hours; "
        "exits 0 whatever it finds (a plan, not a check: see --check)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="the dry run, exiting 3 when a cell to run cannot start (missing or unready data, a missing attribute "
        "file, a method that cannot run, weights neither cached nor downloadable now) and 0 when every one can: "
        "for scripts",
    )
    p.add_argument("--cells", action="store_true", help="with --dry-run / --check: one line per cell and its status")
    p.add_argument("--force", action="store_true", help="rerun the selected cells even when their results exist")
    _add_until_resolved_arguments(p)
    add_margin_argument(p)
    _add_output_arguments(p)
    _add_scale_arguments(p)
    add_quiet_argument(p)
    p.set_defaults(func=run)


def _add_until_resolved_arguments(p) -> None:
    resolved = p.add_argument_group(
        "seeds where they decide (--until-resolved)",
        "Look 1 runs the preset's seeds; each open gap of the ranking (the Average block, headline metric) then "
        "gets the seeds that give it 80 % power, the cheapest gap first, within the budget; look 2 marks the "
        "table. Both looks at alpha 0.025 (0.05 split over the two). Resumable: a rerun plans the same seeds from "
        "the same look-1 results (benchmark/sweeps/resolve.py states the rule).",
    )
    resolved.add_argument(
        "--until-resolved", action="store_true", help="spend further seeds on the open gaps of the ranking"
    )
    resolved.add_argument(
        "--budget",
        metavar="CELLS|TIME",
        help="most cells the table may hold, look 1 included: a number (85) or a time (15m, 900s) turned into "
        "cells with the preset's stated cell_seconds, never a clock read during the run (default: no limit)",
    )
    resolved.add_argument(
        "--max-seeds", type=positive_int, default=30, metavar="N", help="most seeds a row may run (default: 30)"
    )


def _add_output_arguments(p) -> None:
    """Where the runs and the table go, the data and device they use, W&B, and the run options changed."""
    p.add_argument("--out", help="folder of the run folders (default: runs/TABLE)")
    p.add_argument(
        "--results",
        help="folder of the rendered table (default: results/TABLE; for a subset -- --seeds, --datasets, "
        f"--methods or --set -- OUT/{SUBSET_TABLE}, so that a part of the table never writes over the full one)",
    )
    p.add_argument("--data-root", help="dataset root (default: $FEDBENCH_DATA or ~/.cache/fedbench/data)")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--wandb", choices=["auto", "online", "offline", "disabled"], help="W&B mode (default: auto)")
    for option, text in WANDB_NAMING.items():
        p.add_argument(f"--{option.replace('_', '-')}", metavar="TEXT", help=text)
    p.add_argument("--set", nargs="+", metavar="OPTION=VALUE", default=[], help="override run options, e.g. rounds=5")
    p.add_argument(
        "--tuned",
        action="store_true",
        help="apply the hyperparameters `fedbench tune TABLE` chose (RESULTS/tuned.yaml); the table marks those rows 'tuned'",
    )
    p.add_argument(
        "--accept-tuned-options",
        action="store_true",
        help="with --tuned: apply values chosen under other run options than this table's (a --set of the tune "
        "that this call does not repeat, or the reverse), with a warning; without it that is an error",
    )


def _add_scale_arguments(p) -> None:
    scale = p.add_argument_group(
        "where the cells run",
        "Each missing cell runs into its run folder under its lock, whichever executor runs it, and its numbers "
        "do not depend on the executor or the number of workers, given its torch threads (--cpus-per-cell; the "
        f"run's environment.json records them). {extras_note()}",
    )
    scale.add_argument("--executor", choices=list(EXECUTORS), default=DEFAULT, help=executor_help())
    scale.add_argument(
        "--cpus-per-cell",
        type=positive_int,
        metavar="N",
        help="torch CPU threads each cell computes with, and the CPUs Ray or Slurm reserve for it (default: this "
        "process's torch thread count, divided among the --workers, as CPU arithmetic may depend on it; "
        "Ray reserves 1 CPU beside a cell's GPU unless this is given)",
    )
    add_executor_arguments(scale)  # each executor's own flags (benchmark/sweeps/executors/)


# Where a subset's table goes by default: beside its run folders, never over results/TABLE,
# which holds (and in this repository ships) the preset's full table.
SUBSET_TABLE = "subset-table"

# W&B naming flags of every cell (and of the table's run); the environment variables fill in the rest.
WANDB_NAMING = {
    "wandb_project": "W&B project (default: $WANDB_PROJECT, else fedbench)",
    "wandb_entity": "W&B entity, a user or team (default: $WANDB_ENTITY, else your default entity)",
    "wandb_group": "W&B group (default: $WANDB_RUN_GROUP, else the table's name)",
    "wandb_tags": "W&B tags joined by ',', added to the suite's own (default: $WANDB_TAGS)",
}


def make_executor(args):
    """The executor the flags ask for; flags of another executor are an error (exit 2), and so
    is a missing extra (said before anything is planned; not for --dry-run)."""
    return executor_from_args(args, check_extra=not args.dry_run)


def cell_threads(args) -> int | None:
    """The torch threads of each cell: --cpus-per-cell, else this process's shared among the
    local workers (None: this process's own, see CellJob.prepare)."""
    if args.cpus_per_cell or not args.workers or args.workers == 1:
        return args.cpus_per_cell
    import torch

    return max(1, torch.get_num_threads() // args.workers)


def run_tags(preset: str, args) -> tuple[str, ...]:
    """W&B tags telling runs of one group apart: the preset, the filters, the overrides
    (a smoke run with `--set rounds=2` is tagged so, never mistaken for the full table)."""
    tags = [f"preset:{preset}"]
    for key in ("seeds", "datasets", "methods"):
        if getattr(args, key):
            tags.append(f"{key}:{','.join(map(str, getattr(args, key)))}"[:64])
    tags += [f"set:{item}"[:64] for item in args.set]
    if args.force:
        tags.append("forced")
    return tuple(tags)


def subset_flags(args, cells: list, every_cell: list | None) -> list[str]:
    """The flags that make this call a part of the preset's table (filters that leave out some
    of `every_cell`), or another table (--set); none when the call runs the whole table, extra
    methods included (`fedbench demo`: every registered method)."""
    filters = [f"--{key}" for key in ("seeds", "datasets", "methods") if getattr(args, key)]
    partial = every_cell is not None and any(cell not in cells for cell in every_cell)
    return (filters if partial else []) + (["--set"] if args.set else [])


def unreachable_weights(cells: list) -> dict[tuple, str]:
    """(backbone, weights) of `cells` whose weights are neither on this machine nor downloadable
    now (HF_HUB_OFFLINE, or the host does not answer: `check_weights_reachable`) -> why."""
    from benchmark.backbone_weights import BackboneError, check_weights_reachable

    unreachable = {}
    for pair in dict.fromkeys((c.config.backbone, c.config.pretrained) for c in cells):
        try:
            check_weights_reachable(*pair)
        except BackboneError as exc:
            unreachable[pair] = str(exc)
    return unreachable


@dataclass
class Selection:
    """The cells this call asks for and where their table goes."""

    preset: Preset  # tuned with --tuned
    cells: list
    shown: list | None  # the preset's every cell when a filter narrows it, else None
    subset: list[str]  # the flags that make this call a part of the table (`subset_flags`)
    results: Path  # where this call renders its table
    full_table: Path  # where the preset's full table goes
    overrides: dict  # the run options every cell gets (--out, --set, ...)


def run(args) -> int:
    from benchmark.cli.outputs import check_not_another_tables_folder
    from benchmark.runs.results import check_output_location
    from benchmark.sweeps.sweep import run_sweep

    if args.check:
        args.dry_run = True  # a check is a dry run with an exit code
    executor = make_executor(args)
    selection = select_cells(args)
    args.budget_cells = budget_cells(args, selection.preset)
    check_not_another_tables_folder(selection.results, selection.preset.name, "the rendered table (table.md, ...)")
    plan = plan_cells(selection, args)
    print(plan.describe(every_cell=args.cells))
    if selection.results != selection.full_table:
        full_table = selection.full_table
        print(
            f"a subset of {selection.preset.name} ({', '.join(selection.subset)}): its table goes to "
            f"{selection.results}, not {full_table} (the preset's full table); pass --results {full_table} to "
            "render it there"
        )
    if args.dry_run:
        return dry_run(plan, args)
    # The table is written after every cell ran: an unwritable --results found then loses nothing
    # but the user's time, and reads as a traceback.
    check_output_location(selection.results, needed_bytes=0, flag="--results")
    plan = prepare_cells(plan, selection, args)
    check_pinned_device(plan, executor)
    cells = selection.cells
    if args.until_resolved:
        return until_resolved(plan, selection, args, executor)
    report = run_sweep(
        plan,
        selection.results,
        wandb_mode=cells[0].config.wandb if cells else None,
        tags=run_tags(selection.preset.name, args),
        executor=executor,
        threads=cell_threads(args),
    )
    return report_outcome(report, plan, cells)


def select_cells(args) -> Selection:
    """The preset (tuned with --tuned), its cells the flags select and where their table goes."""
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning_studies import TUNED_YAML, check_run_options, load_tuned, load_tuned_notes

    preset = load_preset(args.table)
    full_table = Path(args.results or Path("results") / preset.name)
    if getattr(args, "tuned", False):
        tuned_file = full_table / TUNED_YAML
        values = load_tuned(tuned_file)
        warning = check_run_options(
            tuned_file, preset.run, parse_set(args.set), getattr(args, "accept_tuned_options", False)
        )
        if warning:
            print(f"fedbench reproduce: {warning}", file=sys.stderr)
        preset = preset.with_tuned(values, tuned_command(tuned_file), *load_tuned_notes(tuned_file))
    overrides = {"out": args.out or str(Path("runs") / preset.name)}
    for key in ("data_root", "device", "wandb", *WANDB_NAMING):
        if getattr(args, key):
            overrides[key] = getattr(args, key)
    overrides.update(parse_set(args.set))
    cells = preset.cells(overrides, args.seeds, args.datasets, args.methods)
    filtered = any(getattr(args, k) for k in ("seeds", "datasets", "methods"))
    shown = preset.cells(overrides) if filtered else None
    subset = subset_flags(args, cells, shown)
    results = full_table if args.results or not subset else Path(overrides["out"]) / SUBSET_TABLE
    return Selection(preset, cells, shown, subset, results, full_table, overrides)


def plan_cells(selection: Selection, args):
    """The sweep plan of the selected cells: which are done, which run, what is missing."""
    from benchmark.sweeps.sweep import plan_sweep

    plan = plan_sweep(selection.preset, selection.cells, force=args.force, shown=selection.shown)
    plan.overrides, plan.margin = parse_set(args.set), args.margin
    return plan


def dry_run(plan, args) -> int:
    """The end of --dry-run (0) and --check (3 when a cell to run cannot start)."""
    if not args.cells and plan.cells:
        print("(--cells lists every cell and its status)")
    if not args.check:
        return 0
    # The weights a real `reproduce` checks before its first cell: offline, a tag that
    # is not cached stops it at once, so --check must not answer 0 for it.
    unreachable = unreachable_weights(plan.todo)
    for why in unreachable.values():
        print(f"cells that cannot start: {why}")
    blocked = sum(
        1
        for c in plan.todo
        if not plan.can_run(c) or c.label in plan.invalid or (c.config.backbone, c.config.pretrained) in unreachable
    )
    if blocked:
        print(
            f"fedbench reproduce --check: {blocked} of the {len(plan.todo)} cells to run cannot start (above); exit 3",
            file=sys.stderr,
        )
        return 3
    return 0


def prepare_cells(plan, selection: Selection, args):
    """Check the cells to run can start, build their weights and data; the plan again when
    something was built (a cell is named by the bytes of its weights and split files)."""
    from benchmark.backbone_weights import check_weights_reachable
    from benchmark.config import ConfigError
    from benchmark.runs.identity import prepare_data, prepare_weights

    if plan.invalid:  # checked before any cell runs or any model is built
        raise ConfigError("; ".join(f"cannot run {label}: {why}" for label, why in plan.invalid.items()))
    for backbone, weights in dict.fromkeys((c.config.backbone, c.config.pretrained) for c in plan.todo):
        check_weights_reachable(backbone, weights)  # offline: say how to pass a file before any cell runs
    built = [prepare_weights(p) for p in dict.fromkeys(c.config.pretrained for c in plan.todo)]
    built += [prepare_data(c.config) for c in plan.todo if plan.can_run(c)]  # not-ready data is skipped
    if any(built):  # the cells are named by their weights' bytes and split files, which exist only now
        return plan_cells(selection, args)
    return plan


def check_pinned_device(plan, executor) -> None:
    """A device pinned to one GPU (cuda:N) runs only on the local executor."""
    from benchmark.config import ConfigError

    pinned = sorted({c.config.device for c in plan.todo if c.config.device.startswith("cuda:")})
    if pinned and executor.name != "local":
        raise ConfigError(
            f"device {pinned[0]} pins every cell to one GPU; with --executor {executor.name} each cell "
            "gets a GPU of its own: use --device auto (or cuda)"
        )


def budget_cells(args, preset) -> int | None:
    """--budget as cells, checked before anything is planned or built: a typo (`15x`) passed a
    dry run with exit 0 and stopped a real run only once its weights and data were built, and
    a budget without --until-resolved was ignored."""
    from benchmark.config import ConfigError
    from benchmark.sweeps import resolve

    if args.budget is None:
        return None
    if not args.until_resolved:
        raise ConfigError(
            f"--budget {args.budget} limits the cells of --until-resolved; add --until-resolved, or leave --budget out "
            "(a plain reproduce runs the preset's seeds: --seeds selects among them)"
        )
    try:
        return resolve.budget_cells(args.budget, preset.cell_seconds, preset.name)
    except resolve.BudgetError as exc:
        raise ConfigError(str(exc)) from None


def until_resolved(plan, selection: Selection, args, executor) -> int:
    """`--until-resolved` (benchmark/sweeps/resolve.py): look 1 on the preset's seeds, the
    seeds each open gap needs planned from its results, look 2, the table marked per look."""
    from benchmark.config import ConfigError
    from benchmark.sweeps import resolve
    from benchmark.sweeps.sweep import plan_sweep, render_tables, run_sweep

    preset = selection.preset
    if preset.grid:
        raise ConfigError(f"--until-resolved ranks one block of rows; preset {preset.name} has a grid: run it without")
    budget = args.budget_cells if args.budget_cells is not None else 10**9
    options = dict(
        wandb_mode=selection.cells[0].config.wandb if selection.cells else None,
        tags=run_tags(preset.name, args),
        executor=executor,
        threads=cell_threads(args),
    )
    plan.alpha = resolve.LOOK_ALPHA
    report = run_sweep(plan, selection.results, **options)  # look 1
    if report.submitted or report.failed or report.skipped or report.busy:
        return report_outcome(report, plan, selection.cells)
    ranking, ran, constant = look(selection.cells, args.margin)
    per_seed = max(1, len(selection.cells) // max(1, sum(len(s) for s in ran.values())))
    seeds = resolve.plan_seeds(ranking, ran, len(selection.cells), budget, args.max_seeds, constant, per_seed)
    added = [
        cell
        for label, extra in seeds.extra(ran).items()
        for cell in preset.cells(selection.overrides, extra, args.datasets, [label])
    ]
    cells = selection.cells + added
    final = plan_sweep(preset, cells, force=args.force, shown=(selection.shown or selection.cells) + added)
    final.overrides, final.alpha, final.margin = plan.overrides, resolve.LOOK_ALPHA, args.margin
    if added:
        print(
            f"until-resolved: look 1 leaves {len(seeds.extra(ran))} rows with open gaps; {len(final.todo)} more cells"
        )
        report = run_sweep(final, selection.results, **options)  # look 2
        if report.submitted or report.failed or report.skipped or report.busy:
            return report_outcome(report, final, cells)
        ranking, _, _ = look(cells, args.margin)
    final.design = [resolve.stop_note(seeds, ranking, budget, len(cells), args.max_seeds)]
    report.files = render_tables(final, selection.results, options["wandb_mode"], options["tags"])
    print(final.design[0])
    return report_outcome(report, final, cells)


def look(cells: list, margin: float):
    """The ranking `--until-resolved` reads (the Average block, or the only one) at its alpha
    and the table's `margin`,
    each row's finished seeds, and the deterministic rows."""
    from benchmark.protocol_registry import get_protocol
    from benchmark.sweeps import resolve
    from benchmark.sweeps.table_comparisons import rankings
    from benchmark.sweeps.table_stats import AVERAGE
    from benchmark.sweeps.tables import collect

    long = collect(cells)
    headlines = {c.dataset: get_protocol(c.config.protocol).headline for c in cells}
    ranks = rankings(long, headlines, resolve.LOOK_ALPHA, margin)
    ranking = ranks.get((AVERAGE, "")) or next(iter(ranks.values()))
    ran = {}
    for row in ranking.rows:
        here = long[(long["label"] == row) & (long["metric"] == headlines[cells[0].dataset])]
        ran[row] = sorted(set(int(s) for s in here["seed"]))
    constant = [r for r in ranking.rows if len(ran[r]) > 1 and _constant(long, r)]
    return ranking, ran, constant


def _constant(long, row: str) -> bool:
    values = long[long["label"] == row].groupby("metric")["value"]
    return bool((values.max() == values.min()).all())


def report_outcome(report, plan, cells: list) -> int:
    """Say what ran, failed and was skipped, and print the table; 1 when a cell asked for did not run."""
    if report.submitted:
        print(
            f"submitted {len(report.submitted)} cells, {len(plan.done)} were already done, "
            f"{len(report.skipped)} skipped for missing data; run the same command again once the tasks are done "
            "to render the table"
        )
        return 0
    print(
        f"ran {len(report.ran)} runs, {len(plan.done)} were already done, "
        f"{len(report.skipped)} skipped for missing data, {len(report.failed)} failed"
    )
    if note := untracked_note(cells):
        print(note)
    if report.busy or report.done_elsewhere:
        print(
            f"another process on {cells[0].config.out}: {len(report.done_elsewhere)} cells finished by it meanwhile, "
            f"{len(report.busy)} being run by it now (not in this table yet)"
        )
    for name, error in report.failed.items():
        print(f"FAILED {name}: {error}")
    if report.files.get("md"):
        print(report.files["md"].read_text())
        print("wrote " + ", ".join(str(p) for p in report.files.values()))
    # A cell that was asked for and did not run is never a silent success.
    problems = []
    if report.skipped:
        problems.append(
            f"{len(report.skipped)} of the {len(plan.todo)} cells to run were skipped because their data is missing "
            f"or not ready ({'; '.join(skipped_reasons(report, plan))})"
        )
    if report.failed:
        problems.append(f"{len(report.failed)} cells failed (see FAILED above)")
    if problems:
        verdict = "nothing it was asked to run ran" if not report.ran else "the table is incomplete"
        print(f"fedbench reproduce: {verdict}: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0


def untracked_note(cells: list) -> str:
    """What to do about cells that ran with W&B off: a run folder keeps no W&B record to sync
    later, so the one way to W&B runs of them is to run them again with tracking on."""
    if not cells or any(c.config.wandb != "disabled" for c in cells):
        return ""
    return (
        "W&B was off (--wandb disabled): these runs have no W&B record to sync later; for W&B runs of them, run "
        "the same command again with --force --wandb offline (kept under the --out folder; `wandb sync` uploads "
        "them) or --wandb online"
    )


def skipped_reasons(report, plan) -> list[str]:
    """Why the skipped cells were skipped: their missing datasets, then what blocks the rest."""
    from benchmark.sweeps.sweep import needed_datasets, needs_key

    reasons = [
        f"{d}: {plan.missing_datasets[d]}"
        for d in needed_datasets([c.dataset for c in report.skipped], report.skipped)
        if d in plan.missing_datasets
    ]
    reasons += list(dict.fromkeys(plan.blocked[needs_key(c)] for c in report.skipped if needs_key(c) in plan.blocked))
    return reasons


def tuned_command(path: Path) -> str:
    """The `fedbench tune` command a tuned.yaml records (what the table's note names; it read
    "chosen by `see results/mytoy/tuned.yaml`"), or `fedbench tune` when it records none."""
    import yaml

    data = yaml.safe_load(Path(path).read_text()) or {}
    recorded = data.get("command") if isinstance(data, dict) else None
    return " ".join(str(recorded).split()) if recorded else "fedbench tune"
