"""What `fedbench tune` searches and in what order: the plan of a table's tuning.

A `TuningPlan` holds the variants with something to tune, the budget (grid density,
refinements, extensions), the run seeds of every trial (`tuning_seeds`: from 101 on, never a
seed of the table) and the run options every trial shares. It says what one trial runs
(`cells`), what a study's trials depend on (`identity`) and which point a method tries next
(`next_point`), the last a function of the finished trials alone, so that a resumed search
proposes exactly what an uninterrupted one would have. `plan_tuning` checks the command
line's budget and seeds before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmark.config import ConfigError
from benchmark.method import Choice, LogUniform
from benchmark.protocol_registry import get_protocol
from benchmark.registry import get_method, hyperparameters
from benchmark.runs.identity import cell_identity
from benchmark.sweeps import search
from benchmark.sweeps.presets import Cell, MethodVariant, Preset

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


# The parts of a cell's identity (benchmark.runs.identity) beyond its run options, and how
# a refusal names them.
CODE_PARTS = {
    "method": "the method's source",
    "framework": "the framework code",
    "weights": "the weights",
    "data": "the data code",
    "attributes": "the class-attribute frames",
}


def search_trials(plan: TuningPlan, finished: list) -> list[search.Trial]:
    """The finished Optuna trials as the search reads them: hyperparameters and per-seed
    scores (None for a failed trial)."""
    out = []
    for t in finished:
        per_seed = t.user_attrs.get("per_seed") if t.state.name == "COMPLETE" else None
        scores = None if per_seed is None else tuple(float(per_seed[str(s)]) for s in plan.seeds)
        out.append(search.Trial(dict(t.params), scores))
    return out


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
    def table_variants(self) -> list[MethodVariant]:
        """The variants whose studies the outputs show: the preset's, then those of the plan
        the preset does not list (a method of your own joined with --methods)."""
        listed = {v.label for v in self.preset.methods}
        return [*self.preset.methods, *(v for v in self.variants if v.label not in listed)]

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
