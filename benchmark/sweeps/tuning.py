"""`fedbench tune`: every method of a table gets the same hyperparameter search on
validation data, and the test split is never read.

For each method variant of a preset whose method declares `tunable` hyperparameters: first a
fixed grid over each tuned hyperparameter's declared range (`benchmark.sweeps.search`: at
least `points_per_decade` points a decade for a learning rate, both ends and the paper
default included), then `refinements` trials that bisect the gaps next to the best point of
the smoothed curve -- the same budget for every method of equal range --, then, only while the
choice sits at an end of a learning-rate range, up to `extensions` trials one grid step past
that end (the same rule for every method). Each trial is one run
of every (dataset x grid) cell of the table at every tuning seed (default: four seeds from 101
on that the table does not use) under the table's own federation schedule (plus the same
`--set` overrides for every method), scored by the protocol's headline metric (HM for
base2novel) on the validation split (`RunConfig.eval_split = "val"`, `data.validation`): per
seed the mean over the cells, then the mean over the seeds. The chosen value is the best point
of the smoothed curve among the points within the measured noise of the best single point;
a choice at an end of the values tried or next to a jump beyond the noise is flagged, and the
flag reaches the table.

The plan (variants, budget, seeds, each trial's cells and the next point to try) is
`benchmark.sweeps.tuning_plan`'s; the studies (one per method, in `<results>/tuning.db`),
their resumption and the outputs (tuning.csv, tuning.md, tuning.png, tuned.yaml) are
`benchmark.sweeps.tuning_studies`'s. This module runs the trials. Every trial's point is a
function of the finished trials alone (`TuningPlan.next_point`), so a resumed search proposes
exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmark.config import ConfigError
from benchmark.files import file_lock
from benchmark.method import Choice
from benchmark.runs import runner
from benchmark.runs.identity import prepare_weights
from benchmark.runs.results import is_complete, read_summary
from benchmark.sweeps import search
from benchmark.sweeps.presets import MethodVariant
from benchmark.sweeps.tables import run_dir
from benchmark.sweeps.tuning_plan import TuningPlan
from benchmark.sweeps.tuning_studies import fail_interrupted, finished_trials, open_study, write_outputs


@dataclass
class TrialResult:
    label: str
    number: int
    params: dict[str, Any]
    value: float | None
    error: str | None = None
    phase: str = "grid"  # grid | refinement | extension
    reused: int = 0  # its runs whose finished folders existed already: read, not run again


# -- the search ------------------------------------------------------------------------------
def run_tuning(plan: TuningPlan, report: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the trials still missing, round-robin over the methods (at any moment the budgets
    differ by at most one trial), then write tuning.csv and tuned.yaml. Several processes may
    tune different methods of one table at once (`--methods`); each method's study is locked
    by the process tuning it. Returns tuned.yaml's content."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    plan.results_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as locks:
        for variant in plan.variants:
            locks.enter_context(_exclusive(plan.results_dir / f".tuning-{variant.label}.lock", variant.label))
        # The suite's own weights are named by their bytes: build them before the studies'
        # identities name them (a study must not change identity once they exist).
        for pretrained in dict.fromkeys(c.config.pretrained for v in plan.variants for c in plan.cells(v, {})):
            prepare_weights(pretrained)
        studies = {v.label: open_study(plan, v) for v in plan.variants}
        for label, study in studies.items():
            fail_interrupted(study, report)
        for label in plan.untunable:
            report(f"{label}: declares no tunable hyperparameters; runs with its defaults")
        budgets = {v.label: plan.budget(v) for v in plan.variants}
        for label, study in studies.items():  # a resumed search: say what it does not run again
            done = min(len(finished_trials(study)), budgets[label])
            if done:
                report(
                    f"{label}: {done} of {budgets[label]} trials were already done "
                    f"({plan.results_dir / 'tuning.db'}); they are not run again"
                )
        outputs_report = _once(report)  # the outputs are rewritten after every trial: say each thing once
        for round_index in range(max(budgets.values(), default=0)):
            for variant in plan.variants:
                study = studies[variant.label]
                if len(finished_trials(study)) > round_index or round_index >= budgets[variant.label]:
                    continue
                result = _run_trial(plan, variant, study)
                if result is None:
                    continue
                shown = ", ".join(f"{k}={search.format_value(v)}" for k, v in result.params.items())
                outcome = f"{plan.headline} {result.value:.2f}" if result.error is None else f"FAILED: {result.error}"
                reused = f"; {result.reused} runs were already done: read, not run" if result.reused else ""
                report(
                    f"{variant.label} trial {round_index + 1}/{budgets[variant.label]} ({result.phase}): {shown} -> "
                    f"{outcome} (validation{reused})"
                )
                write_outputs(plan, outputs_report)
        return write_outputs(plan, outputs_report)


def _once(report: Callable[[str], None]) -> Callable[[str], None]:
    """`report`, silent on a line it already said."""
    said: set[str] = set()

    def say(line: str) -> None:
        if line not in said:
            said.add(line)
            report(line)

    return say


def _run_trial(plan: TuningPlan, variant: MethodVariant, study) -> TrialResult | None:
    """The method's next trial (`TuningPlan.next_point`; None: the search is done)."""
    from optuna.trial import TrialState

    space = plan.space(variant)
    found = plan.next_point(variant, finished_trials(study))
    if found is None:
        return None
    params, phase = found
    study.enqueue_trial(params, user_attrs={"phase": phase})
    trial = study.ask()
    params = {name: _suggest(space[name], trial, name, params[name]) for name in sorted(space)}
    try:
        value, per_cell, per_seed, reused = _score(plan, variant, params)
    except Exception as exc:  # a diverging or crashing trial is a spent trial, recorded as failed
        error = f"{exc.__class__.__name__}: {exc}"
        trial.set_user_attr("error", error[:500])
        study.tell(trial, state=TrialState.FAIL)
        return TrialResult(variant.label, trial.number, params, None, error, phase)
    trial.set_user_attr("per_cell", per_cell)
    trial.set_user_attr("per_seed", {str(k): v for k, v in per_seed.items()})
    study.tell(trial, value)
    return TrialResult(variant.label, trial.number, params, value, None, phase, reused)


def _suggest(space, trial, name: str, value: Any) -> Any:
    """The queued `value` through Optuna's API, under a range widened to hold it when it is an
    extension past the declared end (Optuna allows a parameter's bounds to differ between trials)."""
    if isinstance(space, Choice) or space.contains(value):
        return space.suggest(trial, name)
    return replace(space, low=min(space.low, value), high=max(space.high, value)).suggest(trial, name)


def _score(
    plan: TuningPlan, variant: MethodVariant, params: dict[str, Any]
) -> tuple[float, dict[str, float], dict[int, float], int]:
    """The trial's objective: per run seed the mean headline metric on validation over the
    (dataset x grid) cells, then the mean over the seeds; with the value of every run
    ('<dataset> [grid] seed=<S>'), of every seed, and how many runs were read. A finished
    identical run is read, not rerun: trials are deterministic."""

    metric = plan.headline
    per_cell: dict[str, float] = {}
    by_seed: dict[int, list[float]] = {}
    reused = 0
    for cell in plan.cells(variant, params):
        folder = run_dir(cell)
        if is_complete(folder):
            summary, reused = read_summary(folder), reused + 1
        else:
            summary = runner.run_experiment(cell.config, progress=False).summary
        if summary.get("eval_split") != "val":
            raise RuntimeError(f"run {folder} was not scored on the validation split")  # never select on test
        value = float(summary["metrics"][metric])
        if not math.isfinite(value):
            raise FloatingPointError(f"{metric} is {value} on {cell.dataset} at seed {cell.config.seed}")
        name = " ".join([cell.dataset, *(f"{k}={v}" for k, v in cell.grid), f"seed={cell.config.seed}"])
        per_cell[name] = value
        by_seed.setdefault(cell.config.seed, []).append(value)
    per_seed = {seed: sum(values) / len(values) for seed, values in sorted(by_seed.items())}
    return sum(per_seed.values()) / len(per_seed), per_cell, per_seed, reused


@contextmanager
def _exclusive(path: Path, label: str) -> Iterator[None]:
    with file_lock(path, wait=False) as held:
        if not held:
            raise ConfigError(
                f"another `fedbench tune` is tuning {label} in {path.parent}; wait for it, tune other methods "
                "(--methods), or use another --results folder"
            )
        yield
