"""`fedbench reproduce`: expand a preset, run the cells that have no finished run folder,
render the table. Each run folder appears atomically when its run ends, so a sweep that
is killed and restarted redoes only the cells that were running. Each cell is run under its
lock (benchmark.runs.locks), so sweeps sharing a folder split the cells and never run one twice.
The cells run here, one after another, or on Ray or Slurm (benchmark.sweeps.executors)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

from benchmark.errors import RunInterrupted, UserError
from benchmark.federation.simulator import describe_sampling
from benchmark.progress import progress_bar
from benchmark.protocol_registry import get_protocol
from benchmark.runs.checkpoints import resume_note, saved_round
from benchmark.runs.identity import run_name
from benchmark.runs.prechecks import validate_run
from benchmark.runs.readiness import DataCheck, check_attributes, check_dataset
from benchmark.runs.results import is_complete
from benchmark.runs.tracking import Tracker
from benchmark.sweeps import statements
from benchmark.sweeps.cost import data_counts, preset_cost
from benchmark.sweeps.executors.cells import CellJob
from benchmark.sweeps.executors.local import LocalExecutor
from benchmark.sweeps.paper import reference_numbers
from benchmark.sweeps.plots import method_colours, radar, round_curves
from benchmark.sweeps.presets import Cell, Preset
from benchmark.sweeps.scope import TableScope, table_scope
from benchmark.sweeps.table_comparisons import differences, paper_comparison, rankings
from benchmark.sweeps.table_render import render, render_spread, seeds_note
from benchmark.sweeps.table_stats import summarize
from benchmark.sweeps.tables import client_spread_table, collect, failed_cells, numerics_note, run_dir
from data.base import DatasetError
from data.catalog import resolve_data_root

HEADLINE_METHOD = "pfedmma"  # the row the paired differences compare with every other row


@dataclass
class SweepPlan:
    preset: Preset
    cells: list[Cell]
    done: list[Cell]
    todo: list[Cell]
    missing_datasets: dict[str, str]  # dataset -> what to do to get it
    # What the table shows: every cell of the preset under the same settings, whatever the
    # filters selected to run (filters choose what runs, never which rows survive).
    shown: list[Cell] = field(default_factory=list)
    weights_notes: list[str] = field(default_factory=list)  # weights to build or download first
    invalid: dict[str, str] = field(default_factory=dict)  # method label -> why its cells cannot run
    force: bool = False  # rerun the cells even where a finished folder exists (`reproduce --force`)
    # Datasets whose folder is there but that a run cannot read yet (a subset of missing_datasets).
    not_ready: set[str] = field(default_factory=set)
    partial: dict[str, str] = field(default_factory=dict)  # dataset -> "6 of the release's 100 classes"
    blocked: dict[tuple, str] = field(default_factory=dict)  # needs_key(cell) -> why it cannot start
    checks: dict[tuple, DataCheck] = field(default_factory=dict)  # (dataset, data root) -> what a run finds
    overrides: dict[str, Any] = field(default_factory=dict)  # `reproduce --set`: the table says so
    alpha: float = statements.ALPHA  # the level the table's marks are at (`--until-resolved`: per look)
    margin: float = statements.MARGIN  # HM points within which a gap is ≈ (`reproduce --margin`)
    design: list[str] = field(default_factory=list)  # how `--until-resolved` chose the seeds

    def describe(self, every_cell: bool = False) -> str:
        failed_before = len(failed_cells(self.todo))
        lines = [
            f"{self.preset.name}: {self.preset.title}",
            f"{len(self.cells)} cells: {len(self.done)} done, {len(self.todo)} to run"
            + (f" ({failed_before} failed last time: run again)" if failed_before else ""),
        ]
        sampling = {(c.config.client_sampling, _planned_clients(c.config), c.config.participation) for c in self.cells}
        lines.extend(
            f"client sampling: {describe_sampling(*s)}"
            if s[1]
            else f"client sampling: {s[0]} (clients follow from the data)"
            for s in sorted(sampling, key=str)
        )
        by_dataset: dict[str, list[int]] = {}
        for cell in self.cells:
            counts = by_dataset.setdefault(cell.dataset, [0, 0])
            counts[0] += 1
            counts[1] += cell in self.done
        for name, (total, done) in by_dataset.items():
            lines.append(f"  {name:<18} {done:>4}/{total:<4} done   data {self.data_status(name)}")
        lines += self._waiting_lines()
        if every_cell:
            lines += self._cell_lines()
        for name, how in self.missing_datasets.items():
            lines.append(f"{'dataset not ready' if name in self.not_ready else 'missing dataset'} {name}: {how}")
        for name, what in self.partial.items():
            lines.append(
                f"partial dataset {name}: {what}; its cells run, but they are not the paper's cells (the table says so)"
            )
        for why in dict.fromkeys(self.blocked.values()):
            lines.append(f"cells that cannot start: {why}")
        for note in self.weights_notes:
            lines.append(f"missing weights: {note}")
        lines.extend(self.cost_lines())
        for label, why in self.invalid.items():
            lines.append(f"cannot run {label}: {why}")
        return "\n".join(lines)

    def _waiting_lines(self) -> list[str]:
        """The cells that cannot start, grouped by what they need ("21 cells need sun397"); one
        line per cell (168 for Table 1, before any summary) only when asked (`--cells`: `_cell_lines`)."""
        need: dict[str, int] = {}
        blocked = 0
        for cell in self.todo:
            lacking = [d for d in needed_datasets([cell.dataset], [cell]) if d in self.missing_datasets]
            for d in lacking:
                need[d] = need.get(d, 0) + 1
            blocked += not lacking and needs_key(cell) in self.blocked
        waiting = self.cannot_start()
        lines: list[str] = []
        if waiting:
            lines.append(f"{waiting} of the {len(self.todo)} cells to run cannot start:")
            lines.extend(f"  {n} cells need {d}" for d, n in need.items())
            if blocked:
                lines.append(f"  {blocked} cells lack another input (cells that cannot start, below)")
        return lines

    def _cell_lines(self) -> list[str]:
        """One line per cell and its status (`--cells`)."""
        lines = ["cells (label | dataset | grid | target | seed | status):"]
        for cell in self.cells:
            lacking = [d for d in needed_datasets([cell.dataset], [cell]) if d in self.missing_datasets]
            status = "done" if cell in self.done else (f"needs {'+'.join(lacking)}" if lacking else "to run")
            if status == "to run" and needs_key(cell) in self.blocked:
                status = "cannot start: " + self.blocked[needs_key(cell)].split(":")[0]
            grid = cell.grid_text or "-"
            lines.append(
                f"  {cell.label} | {cell.dataset} | {grid} | {cell.part or '-'} | seed {cell.config.seed} | {status}"
            )
        return lines

    def cost_lines(self) -> list[str]:
        """The preset's estimated FLOPs and GPU-hours (`benchmark/sweeps/cost.py`), and of what is left."""
        counts = data_counts(self.checks)
        lines = [preset_cost(self.cells, counts).line()]
        if self.done and self.todo:
            lines.append("left to run: " + preset_cost(self.todo, counts).line())
        return lines

    def data_status(self, section: str) -> str:
        """'present' only when every cell of the section would start on its data."""
        needed = needed_datasets([section], self.cells)
        absent = [d for d in needed if d in self.missing_datasets and d not in self.not_ready]
        unreadable = [d for d in needed if d in self.not_ready]
        blocked = [c for c in self.cells if c.dataset == section and needs_key(c) in self.blocked]
        partial = [f"{d}: {self.partial[d]}" for d in needed if d in self.partial]
        said = []
        if absent:
            said.append(f"MISSING {', '.join(absent)}")
        if unreadable:
            said.append(f"NOT READY {', '.join(unreadable)} (see below)")
        if blocked:
            said.append(f"NOT READY for {len(blocked)} cells (see below)")
        if partial:
            said.append(f"NOT READY for the paper's table: {'; '.join(partial)}")
        return "; ".join(said) or "present"

    def cannot_start(self) -> int:
        """How many of the cells to run would not start: missing or unready data, a missing
        input (an attribute file), or a method that cannot run."""
        return sum(1 for c in self.todo if not self.can_run(c) or c.label in self.invalid)

    def can_run(self, cell: Cell) -> bool:
        if needs_key(cell) in self.blocked:
            return False
        return not any(d in self.missing_datasets for d in needed_datasets([cell.dataset], [cell]))


def needs_key(cell: Cell) -> tuple:
    """What a cell's extra inputs depend on: its method, dataset and attribute folder."""
    config = cell.config
    return (config.method, tuple(config.datasets), config.attributes, config.data_root)


def _planned_clients(config) -> int | None:

    return get_protocol(config.protocol).planned_clients(config)


def needed_datasets(sections: list[str], cells: list[Cell]) -> list[str]:
    """Every dataset the cells of these table sections load: trained on and tested on."""
    names: dict[str, None] = {}
    for cell in cells:
        if cell.dataset in sections:
            names.update(dict.fromkeys(cell.config.datasets + cell.config.test_datasets))
    return list(names)


def check_data(cells: list[Cell]) -> tuple[dict[str, str], set[str], dict[str, str], dict[tuple, DataCheck]]:
    """What a run of each cell would find of its data, each dataset checked once per data
    root: (missing: dataset -> what to do to get it, not ready: present but unreadable (a
    subset of missing), partial: dataset -> what is lacking, every check)."""
    missing: dict[str, str] = {}
    not_ready: set[str] = set()
    partial: dict[str, str] = {}
    checks: dict[tuple, DataCheck] = {}
    for cell in cells:
        root = resolve_data_root(cell.config.data_root)
        for name in cell.config.datasets + cell.config.test_datasets:
            if (name, root) in checks:
                continue
            try:
                check = checks[name, root] = check_dataset(name, root)
            except DatasetError as exc:  # an unknown dataset
                checks[name, root] = DataCheck(absent=True, why=str(exc))
                missing[name] = str(exc)
                continue
            if not check.ready:
                missing[name] = check.why
                if not check.absent:
                    not_ready.add(name)
            elif check.partial:
                partial[name] = check.partial
    return missing, not_ready, partial, checks


def missing_datasets(cells: list[Cell]) -> dict[str, str]:
    """The datasets the cells load that a run could not start on: name -> where it was looked
    for and how to get it (generated datasets, such as the toy world's, are never missing)."""
    return check_data(cells)[0]


def plan_sweep(preset: Preset, cells: list[Cell], force: bool = False, shown: list[Cell] | None = None) -> SweepPlan:
    """A cell is done when a finished run folder of its identity exists (`force`: none is).
    `shown` (default `cells`) are the cells the rendered table reads; `cells` are added to it."""

    done = [] if force else [c for c in cells if is_complete(run_dir(c))]
    todo = [c for c in cells if c not in done]
    missing, not_ready, partial, checks = check_data(cells)
    blocked: dict[tuple, str] = {}
    for cell in todo:
        key = needs_key(cell)
        check = checks.get((cell.config.datasets[0], resolve_data_root(cell.config.data_root)))
        if key not in blocked and check is not None and check.ready:
            why = check_attributes(cell.config, check.class_names)
            if why:
                blocked[key] = why
    # Method, hyperparameters, protocol and weights of every cell, before anything is built.

    weights_notes: list[str] = []
    invalid: dict[str, str] = {}  # cell label -> why it cannot run
    for cell in cells:
        try:
            notes = validate_run(cell.config, check_data=False)
        except UserError as exc:
            invalid.setdefault(cell.label, str(exc).splitlines()[0])
            continue
        for note in notes:
            if note not in weights_notes:
                weights_notes.append(note)
    names = {run_name(c.config) for c in shown or []}
    shown = list(shown or []) + [c for c in cells if run_name(c.config) not in names]
    return SweepPlan(
        preset, cells, done, todo, missing, shown, weights_notes, invalid, force, not_ready, partial, blocked, checks
    )


@dataclass
class SweepReport:
    ran: list[Cell] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # run name -> error
    skipped: list[Cell] = field(default_factory=list)  # data missing
    busy: dict[str, str] = field(default_factory=dict)  # run name -> who is running it now
    done_elsewhere: list[Cell] = field(default_factory=list)  # finished by another sweep meanwhile
    submitted: list[Cell] = field(default_factory=list)  # handed to a scheduler that is not waited for
    files: dict[str, Path] = field(default_factory=dict)

    def record(self, cell: Cell, outcome) -> None:
        """What an executor reported for one cell (benchmark.sweeps.executors.cells.Outcome)."""
        name = run_name(cell.config)
        if outcome.status == "ran":
            self.ran.append(cell)
        elif outcome.status == "done_elsewhere":
            self.done_elsewhere.append(cell)
        elif outcome.status == "busy":
            self.busy[name] = outcome.detail
        else:
            self.failed[name] = outcome.detail

    @property
    def finished(self) -> int:
        return len(self.ran) + len(self.failed) + len(self.busy) + len(self.done_elsewhere)


def run_sweep(
    plan: SweepPlan,
    results_dir: Path,
    progress: bool = True,
    wandb_mode: str | None = None,
    tags: tuple[str, ...] = (),
    executor=None,
    threads: int | None = None,
) -> SweepReport:
    """Run the missing cells on `executor` (default: here, one after another; see
    benchmark.sweeps.executors), a failing cell reported while the others go on, then render the
    table -- unless the executor only submitted them. `threads`: each cell's torch threads
    (default: this process's)."""
    executor = executor or LocalExecutor()
    report = SweepReport(skipped=[c for c in plan.todo if not plan.can_run(c)])
    jobs = [CellJob.prepare(c, plan.force, tags, threads) for c in plan.todo if plan.can_run(c)]
    # A bar of the table's cells: those done before count from the start, the ETA follows
    # the cells finished in this call.
    bar = progress_bar(
        total=len(plan.done) + len(jobs),
        initial=len(plan.done),
        desc=f"reproduce {plan.preset.name}",
        unit="cells",
        enabled=progress and bool(jobs),
    )

    def started(job) -> None:
        bar.set_postfix_str(f"{job.cell.label} / {job.cell.dataset} / seed {job.cell.config.seed}")

    try:
        for job, outcome in executor.run(jobs, started) if jobs else ():
            report.record(job.cell, outcome)
            if outcome.traceback and progress:
                print(outcome.traceback, file=sys.stderr)
            bar.update()
    except RunInterrupted as stop:
        bar.close()
        _report_interrupted(plan, report, jobs, stop)
        raise
    bar.close()
    if jobs and not executor.waits:  # submitted, not waited for: the table is rendered by the next call
        report.submitted = [job.cell for job in jobs]
        return report
    report.files = render_tables(plan, results_dir, wandb_mode, tags)
    return report


def _report_interrupted(plan: SweepPlan, report: SweepReport, jobs: list, stop: RunInterrupted) -> None:
    """What a stopped sweep leaves: which cells are finished, which were cut short, and (as
    `stop.notes`, read from the disk whichever executor ran them) which of those left a
    round checkpoint to resume from."""
    print(
        f"reproduce {plan.preset.name} stopped; finished in this call: {len(report.ran)}, "
        f"finished before: {len(plan.done)}, failed: {len(report.failed)}, "
        f"not finished: {len(jobs) - report.finished}"
    )
    for cell in report.ran:
        print(f"finished {run_name(cell.config)}")
    print("run the same command again to do the rest")
    recorded = {run_name(c.config) for c in report.ran + report.done_elsewhere} | set(report.failed) | set(report.busy)
    unfinished = [job.cell for job in jobs if run_name(job.cell.config) not in recorded]
    kept = [c for c in unfinished if saved_round(Path(c.config.out) / run_name(c.config)) is not None]
    stop.notes[:] = [resume_note(Path(c.config.out) / run_name(c.config)) for c in kept]
    if len(unfinished) > len(kept):
        stop.notes.append(
            f"{len(unfinished) - len(kept)} other unfinished cell(s) left no round checkpoint; "
            "the same command starts them from round 1"
        )


def render_tables(
    plan: SweepPlan, results_dir: Path, wandb_mode: str | None = None, tags: tuple[str, ...] = ()
) -> dict[str, Path]:
    """Tables (md/csv/tex), the paper comparison, the headline method's paired differences
    and the figures, from every finished cell of the table (filters select what runs, not
    what is shown)."""

    notes = []
    if any(c.hyperparameters.startswith("tuned") for c in plan.shown):
        notes.append(
            f"Tuned rows use the values chosen by `{plan.preset.tuned_command}`."
            if plan.preset.tuned_command
            else "Tuned rows use the values chosen by `fedbench tune`."
        )
        if plan.preset.tuned_budget:
            notes.append(f"Tuning budget, the same for every tuned method: {plan.preset.tuned_budget}.")
    preset_methods = [m.method for m in plan.preset.methods if m.label == m.method]
    finished = [c for c in plan.shown if is_complete(run_dir(c))]
    scope = table_scope(plan.preset, plan.shown, finished, plan.overrides, plan.partial)
    if plan.design:  # `--until-resolved` chose its seeds beyond the preset's: the design, stated in its note
        scope = replace(scope, extra_seeds=[])
    rendered = render_cells(
        plan.shown,
        Path(results_dir),
        plan.preset.title,
        plan.preset.paper_table,
        preset_methods,
        [*notes, *plan.design],
        scope=scope,
        tuning_flags=plan.preset.tuned_flags,
        alpha=plan.alpha,
        margin=plan.margin,
    )
    if rendered is None:
        return {}
    stats, comparison, files = rendered
    if wandb_mode and wandb_mode != "disabled":
        _log_tables(plan, stats, comparison, files, wandb_mode, tags)
    return files


def render_cells(
    cells: list[Cell],
    out: Path,
    title: str,
    paper_table: str | None = None,
    preset_methods: list[str] = (),
    notes: list[str] = (),
    reference: str = HEADLINE_METHOD,
    scope: TableScope | None = None,
    tuning_flags: Mapping[str, str] | None = None,
    alpha: float = statements.ALPHA,
    margin: float = statements.MARGIN,
):
    """The table (md/csv/tex), the paper comparison, `reference` minus each other row
    (paired differences) and the figures (radar.png, curves.png) of the finished `cells`,
    into `out`: what `fedbench reproduce` renders for a preset and `fedbench runs --plot`
    for a folder of runs; ≈ within `margin` points. `tuning_flags` (variant label -> reason) marks the tuned rows whose
    choice `fedbench tune` flagged. Returns (stats, comparison, files), or None when no cell
    finished."""
    long = collect(cells)
    headlines = {c.dataset: get_protocol(c.config.protocol).headline for c in cells}
    stats = summarize(long, failed_cells(cells), headlines, margin)
    if stats.empty:
        return None
    if tuning_flags:
        stats["tuning"] = [
            tuning_flags.get(label.split(" (")[0], "") if origin.startswith("tuned") else ""
            for label, origin in zip(stats["label"], stats["hyperparameters"])
        ]
    numbers = reference_numbers(paper_table) if paper_table else None
    comparison = paper_comparison(stats, numbers if numbers is not None else _empty(), list(preset_methods))
    if scope is not None:  # a subset or a changed table: says so, and compares only what is the paper's
        comparison = scope.comparison(comparison, stats)
        title, notes = scope.title(title), [*scope.notes(), *notes]
    headline = get_protocol(cells[0].config.protocol).headline
    diffs = differences(long, reference, headline, alpha, margin)
    numerics = numerics_note(cells)  # threads, device, precision, CPU kernels: the table's or a mix
    seeds = seeds_note(long)
    ranks = rankings(long, headlines, alpha, margin)
    files = render(
        stats, comparison, out, title, diffs, [*notes, *([numerics] if numerics else []), *seeds], ranks=ranks
    )
    spread = client_spread_table(cells)
    if not spread.empty:
        files.update(render_spread(spread, out, title))
    colours = method_colours([c.label for c in cells])  # the same colour for a method in every figure
    figures = (
        ("radar", radar(stats, out / "radar.png", colours)),
        ("curves", round_curves(cells, out / "curves.png", colours)),
    )
    for name, path in figures:
        if path is not None:
            files[name] = path
    return stats, comparison, files


def _empty():
    import pandas as pd

    return pd.DataFrame()


def _log_tables(plan: SweepPlan, stats, comparison, files: dict[str, Path], wandb_mode: str, tags=()) -> None:
    """The rendered table and plots, logged once per reproduction in a run of their own."""

    config = replace(plan.cells[0].config, wandb=wandb_mode)  # project, group and output folder
    images = {k: v for k, v in files.items() if v.suffix == ".png"}
    tables: dict[str, Any] = {"table": stats}
    if not comparison.empty:
        tables["paper_comparison"] = comparison
    table_config = {
        "preset": plan.preset.name,
        "title": plan.preset.title,
        "paper_table": plan.preset.paper_table,
        "cells": len(plan.shown),
        "methods": sorted({c.label for c in plan.shown}),
        "datasets": sorted({c.dataset for c in plan.shown}),
    }
    with Tracker.for_run(
        config, job_type="table", name=f"table-{plan.preset.name}", run_config=table_config, tags=(*tags, "table")
    ) as tracker:
        tracker.log_artifacts(tables, images)
