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

The studies (one per method, in `<results>/tuning.db`), their resumption and the outputs
(tuning.csv, tuning.md, tuning.png, tuned.yaml) are `benchmark.sweeps.tuning_studies`'s.
Every trial's point is a function of the finished trials alone (`TuningPlan.next_point`), so
a resumed search proposes exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import math
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from benchmark.config import ConfigError
from benchmark.files import file_lock
from benchmark.method import Choice, LogUniform
from benchmark.protocol_registry import get_protocol
from benchmark.registry import get_method, hyperparameters
from benchmark.runs import runner
from benchmark.runs.identity import cell_identity, prepare_weights
from benchmark.runs.results import is_complete, read_summary
from benchmark.sweeps import search
from benchmark.sweeps.presets import Cell, MethodVariant, Preset
from benchmark.sweeps.tables import run_dir
from benchmark.sweeps.tuning_studies import (
    CODE_PARTS,
    fail_interrupted,
    finished_trials,
    open_study,
    search_trials,
    write_outputs,
)

MIN_SEEDS = 2  # a trial's score is the mean over at least this many run seeds (two measure its noise)
DEFAULT_SEEDS = 4  # tuning seeds by default: two could not tell neighbouring learning rates apart
FIRST_TUNING_SEED = 101  # tuning draws its run seeds from here on, away from any table's


def tuning_seeds(preset: Preset) -> list[int]:
    """The default run seeds of every trial: the first DEFAULT_SEEDS integers from 101 on that
    the preset's table does not use. Selection and report never share draws: a value chosen
    on the table's own seeds would be scored on the noise it was selected for."""
    seeds, candidate = [], FIRST_TUNING_SEED
    while len(seeds) < DEFAULT_SEEDS:
        if candidate not in preset.seeds:
            seeds.append(candidate)
        candidate += 1
    return seeds


@dataclass
class TrialResult:
    label: str
    number: int
    params: dict[str, Any]
    value: float | None
    error: str | None = None
    phase: str = "grid"  # grid | refinement | extension


@dataclass
class TuningPlan:
    """What `fedbench tune` searches: the variants with something to tune, the budget (grid
    density and refinements), the run seeds of every trial and the run options every trial
    shares (the table's schedule plus `overrides`)."""

    preset: Preset
    points_per_decade: int
    refinements: int
    extensions: int

    overrides: dict[str, Any]  # run options for every trial of every method (--set, out, data_root, ...)
    results_dir: Path
    variants: list[MethodVariant]
    untunable: list[str] = field(default_factory=list)  # labels whose method declares nothing to tune
    datasets: list[str] | None = None
    command: str = ""
    seeds: list[int] = field(default_factory=lambda: [1, 2])  # run seeds of every trial

    @property
    def headline(self) -> str:

        protocols = {c.config.protocol for v in self.variants for c in self.cells(v, {})}
        if len(protocols) != 1:
            raise ConfigError(
                f"table {self.preset.name} mixes protocols {sorted(protocols)}; tune one protocol at a time"
            )
        return get_protocol(protocols.pop()).headline

    def space(self, variant: MethodVariant) -> dict[str, Any]:

        return dict(get_method(variant.method).tunable)

    def grid(self, variant: MethodVariant) -> list[dict[str, Any]]:
        """The method's grid, the paper default first."""
        defaults = {h.name: h.default for h in hyperparameters(get_method(variant.method))}
        return search.grid(self.space(variant), defaults, self.points_per_decade)

    def valid(self, variant: MethodVariant) -> dict[str, Any]:
        """The valid values of each tuned hyperparameter (its `Range`): an extension stays inside."""
        return {h.name: h.range for h in hyperparameters(get_method(variant.method)) if h.range is not None}

    def budget(self, variant: MethodVariant) -> int:
        """Trials of the method at most: its grid, then the refinements (none for a space of
        Choices), then the extensions (only on a log range, and run only while needed)."""
        space = self.space(variant).values()
        numeric = any(not isinstance(s, Choice) for s in space)
        log = any(isinstance(s, LogUniform) for s in space)
        return len(self.grid(variant)) + (self.refinements if numeric else 0) + (self.extensions if log else 0)

    def next_point(self, variant: MethodVariant, finished: list) -> tuple[dict[str, Any], str] | None:
        """The method's next trial (its point and phase) after the `finished` ones: the next
        grid point, else a refinement while fewer than `refinements` ran, else an extension
        while fewer than `extensions` ran and the choice sits at an end of a log range; None
        when the search is done. A function of the finished trials alone (a resumed search
        proposes what an uninterrupted one would have)."""
        space, grid = self.space(variant), self.grid(variant)
        if len(finished) < len(grid):
            return grid[len(finished)], "grid"
        points = search_trials(self, finished)
        phases = [t.user_attrs.get("phase") for t in finished]
        if phases.count("refinement") < self.refinements:
            params = search.refinement(space, points)
            if params is not None:
                return params, "refinement"
        if phases.count("extension") < self.extensions:
            params = search.extension(space, points, self.valid(variant), self.points_per_decade)
            if params is not None:
                return params, "extension"
        return None

    @property
    def budget_text(self) -> str:
        """The search every method got, in words (every table's notes say it)."""
        return (
            f"a grid of {self.points_per_decade} points per decade over each learning-rate range (paper default and "
            f"both ends included), then {self.refinements} refinements around the best point of the smoothed curve, "
            f"then up to {self.extensions} steps of 1/{self.points_per_decade} decade past an end of the range while "
            f"the choice sits at that end; each trial the mean validation {self.headline} over seeds {', '.join(map(str, self.seeds))}"
        )

    def cells(self, variant: MethodVariant, params: dict[str, Any]) -> list[Cell]:
        """The runs of one trial: every (dataset x grid) cell at every tuning seed, on the
        validation split, with the trial's hyperparameters over the variant's own."""
        layer = {**self.overrides, "eval_split": "val", "wandb": "disabled", "method_args": dict(params)}
        cells = self.preset.cells(layer, list(self.seeds), self.datasets, [variant.label], tuned={})
        # A trial reads the final round only: no evaluation between rounds (it changes no number,
        # and on FedOTP it was most of a trial's time).
        return [replace(c, config=replace(c.config, eval_every=c.config.rounds)) for c in cells]

    def identity(self, variant: MethodVariant) -> dict[str, Any]:
        """What a study's trials depend on; a study is resumed only under the same identity."""
        space = self.space(variant)
        configs = []
        for cell in self.cells(variant, {}):
            key = cell.config.result_key()
            key["method_args"] = {k: v for k, v in key["method_args"].items() if k not in space}
            configs.append(key)
        return {
            "space": {k: repr(v) for k, v in sorted(space.items())},
            "points_per_decade": self.points_per_decade,  # the grid; refinements and extensions only extend a study
            "seeds": list(self.seeds),
            "metric": self.headline,
            "configs": configs,
            "code": self.code_identity(variant),
        }

    def code_identity(self, variant: MethodVariant) -> dict[str, list]:
        """What the trials' cells run, beyond their options: each part of their cell
        identity in CODE_PARTS (method source, framework code, weights, data code), the
        distinct values over the cells. A trial scored under other code scored another method."""
        parts: dict[str, list] = {}
        for cell in self.cells(variant, {}):
            identity = cell_identity(cell.config)
            for part in CODE_PARTS:
                if part in identity and identity[part] not in parts.setdefault(part, []):
                    parts[part].append(identity[part])
        return {part: values for part, values in parts.items() if values}


def plan_tuning(
    preset: Preset,
    results_dir: Path,
    overrides: dict[str, Any],
    methods: list[str] | None = None,
    datasets: list[str] | None = None,
    command: str = "",
    seeds: list[int] | None = None,
    points_per_decade: int = search.POINTS_PER_DECADE,
    refinements: int = search.REFINEMENTS,
    extensions: int = search.EXTENSIONS,
) -> TuningPlan:
    """`seeds` are the run seeds of every trial (default `tuning_seeds`), at least MIN_SEEDS
    distinct ones."""
    if points_per_decade < 1:
        raise ConfigError(f"--points-per-decade {points_per_decade} is invalid: expected an integer >= 1")
    if refinements < 0:
        raise ConfigError(f"--refinements {refinements} is invalid: expected an integer >= 0")
    if extensions < 0:
        raise ConfigError(f"--extensions {extensions} is invalid: expected an integer >= 0")
    seeds = tuning_seeds(preset) if seeds is None else list(dict.fromkeys(int(x) for x in seeds))
    if len(seeds) < MIN_SEEDS:
        raise ConfigError(
            f"--seeds {' '.join(map(str, seeds))} is too few: a trial is scored by its mean over at least "
            f"{MIN_SEEDS} run seeds, so that a value that works at one seed only does not win"
        )
    shared = sorted(set(seeds) & set(preset.seeds))
    if shared:
        raise ConfigError(
            f"--seeds {' '.join(map(str, seeds))} shares seed(s) {shared} with table {preset.name}'s seeds "
            f"{preset.seeds}: values selected on the table's own draws make its gains look larger than they are. "
            f"Use seeds the table does not list (default: {' '.join(map(str, tuning_seeds(preset)))})"
        )
    chosen = preset.select_methods(methods)
    variants, untunable = [], []
    for variant in chosen:
        (variants if get_method(variant.method).tunable else untunable).append(variant)
    untunable_labels = [v.label for v in untunable]
    plan = TuningPlan(
        preset,
        points_per_decade,
        refinements,
        extensions,
        dict(overrides),
        Path(results_dir),
        variants,
        untunable_labels,
        datasets,
        command,
        seeds,
    )
    if variants:
        plan.cells(variants[0], {})  # validates the filters and the overrides before anything runs
    return plan


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
                report(
                    f"{variant.label} trial {round_index + 1}/{budgets[variant.label]} ({result.phase}): {shown} -> "
                    f"{outcome} (validation)"
                )
                write_outputs(plan, report)
        return write_outputs(plan, report)


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
        value, per_cell, per_seed = _score(plan, variant, params)
    except Exception as exc:  # a diverging or crashing trial is a spent trial, recorded as failed
        error = f"{exc.__class__.__name__}: {exc}"
        trial.set_user_attr("error", error[:500])
        study.tell(trial, state=TrialState.FAIL)
        return TrialResult(variant.label, trial.number, params, None, error, phase)
    trial.set_user_attr("per_cell", per_cell)
    trial.set_user_attr("per_seed", {str(k): v for k, v in per_seed.items()})
    study.tell(trial, value)
    return TrialResult(variant.label, trial.number, params, value, None, phase)


def _suggest(space, trial, name: str, value: Any) -> Any:
    """The queued `value` through Optuna's API, under a range widened to hold it when it is an
    extension past the declared end (Optuna allows a parameter's bounds to differ between trials)."""
    if isinstance(space, Choice) or space.contains(value):
        return space.suggest(trial, name)
    return replace(space, low=min(space.low, value), high=max(space.high, value)).suggest(trial, name)


def _score(
    plan: TuningPlan, variant: MethodVariant, params: dict[str, Any]
) -> tuple[float, dict[str, float], dict[int, float]]:
    """The trial's objective: per run seed the mean headline metric on validation over the
    (dataset x grid) cells, then the mean over the seeds; with the value of every run
    ('<dataset> [grid] seed=<S>') and of every seed. A finished identical run is read, not
    rerun: trials are deterministic."""

    metric = plan.headline
    per_cell: dict[str, float] = {}
    by_seed: dict[int, list[float]] = {}
    for cell in plan.cells(variant, params):
        folder = run_dir(cell)
        summary = (
            read_summary(folder) if is_complete(folder) else runner.run_experiment(cell.config, progress=False).summary
        )
        if summary.get("eval_split") != "val":
            raise RuntimeError(f"run {folder} was not scored on the validation split")  # never select on test
        value = float(summary["metrics"][metric])
        if not math.isfinite(value):
            raise FloatingPointError(f"{metric} is {value} on {cell.dataset} at seed {cell.config.seed}")
        name = " ".join([cell.dataset, *(f"{k}={v}" for k, v in cell.grid), f"seed={cell.config.seed}"])
        per_cell[name] = value
        by_seed.setdefault(cell.config.seed, []).append(value)
    per_seed = {seed: sum(values) / len(values) for seed, values in sorted(by_seed.items())}
    return sum(per_seed.values()) / len(per_seed), per_cell, per_seed


@contextmanager
def _exclusive(path: Path, label: str) -> Iterator[None]:
    with file_lock(path, wait=False) as held:
        if not held:
            raise ConfigError(
                f"another `fedbench tune` is tuning {label} in {path.parent}; wait for it, tune other methods "
                "(--methods), or use another --results folder"
            )
        yield
