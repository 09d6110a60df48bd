"""What a rendered table is: the preset's table, or something smaller or changed.

A `reproduce` run with `--set` overrides, other weights than the preset's, data with fewer
classes than the release, only some of the preset's datasets, methods or seeds finished, or
seeds the preset does not list (`--seeds 4 5 6` renders them with the preset's own),
renders a table that must not pass for the paper's. `table_scope` says how it differs; the
renderer puts that in the title and the notes, and compares with the paper only the cells
that are the paper's: none when the cells' settings or data differ, and an Average only
where a row has every dataset of the preset (the paper's average is over all of them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from benchmark.sweeps.presets import available_presets, load_preset

# `--set` keys that change where or how a run is done, not its numbers.
NEUTRAL_OVERRIDES = frozenset(
    {"out", "data_root", "device", "wandb", "wandb_project", "wandb_entity", "wandb_group", "num_workers"}
)


@dataclass
class TableScope:
    overrides: dict[str, Any] = field(default_factory=dict)  # `--set` values that change numbers
    weights: str = ""  # other weights than the preset's, said in words
    partial: dict[str, str] = field(default_factory=dict)  # dataset -> "6 of the release's 100 classes"
    absent: dict[str, list[str]] = field(default_factory=dict)  # axis -> the preset's values with no finished cell
    totals: dict[str, int] = field(default_factory=dict)  # axis -> how many the preset has
    paper_table: str | None = None
    uneven: list[str] = field(default_factory=list)  # rows with finished cells on some datasets only
    extra_seeds: list[int] = field(default_factory=list)  # finished seeds the preset does not list (--seeds)

    @property
    def cells_are_the_papers(self) -> bool:
        """The settings and data of every cell are the preset's."""
        return not (self.overrides or self.weights or self.partial)

    @property
    def complete(self) -> bool:
        return self.cells_are_the_papers and not any(self.absent.values()) and not self.extra_seeds

    def summary(self) -> str:
        parts = []
        for axis in ("datasets", "methods", "seeds"):
            missing = self.absent.get(axis, [])
            if missing:
                parts.append(f"{self.totals[axis] - len(missing)} of {self.totals[axis]} {axis}")
        if self.extra_seeds:
            parts.append("seeds " + ", ".join(map(str, self.extra_seeds)) + " beyond the preset's")
        if self.overrides:
            parts.append("--set " + " ".join(f"{k}={v}" for k, v in self.overrides.items()))
        if self.weights:
            parts.append(self.weights)
        if self.partial:
            parts.append("partial data (" + ", ".join(self.partial) + ")")
        return "; ".join(parts)

    def title(self, title: str) -> str:
        if self.complete:
            return title
        what = "NOT the paper's table" if self.paper_table else "NOT the preset's table"
        return f"{title} -- {what}: {self.summary()}"

    def notes(self) -> list[str]:
        if self.complete:
            return []
        notes = []
        if self.overrides:
            notes.append(
                "Settings changed from the preset's (`--set`): "
                + ", ".join(f"{k}={v}" for k, v in self.overrides.items())
                + "; rows marked `hyperparameters: paper` keep the methods' defaults, not the paper's schedule."
            )
        if self.weights:
            notes.append(f"Weights: {self.weights}.")
        for dataset, what in self.partial.items():
            notes.append(f"Partial data: {dataset} has {what}.")
        for axis in ("datasets", "methods", "seeds"):
            missing = self.absent.get(axis, [])
            if missing:
                notes.append(
                    f"{axis.capitalize()}: {self.totals[axis] - len(missing)} of the preset's {self.totals[axis]} have "
                    f"finished cells; without any: {', '.join(map(str, missing))}."
                    + (" The Average is over the datasets shown only." if axis == "datasets" else "")
                )
        if self.extra_seeds:
            notes.append(
                f"Seeds {', '.join(map(str, self.extra_seeds))} are not the preset's ({self.totals['seeds']} listed): "
                "each row's mean and std pool them with the preset's seeds that finished (n says how many); the "
                "run folders hold each seed's numbers."
            )
        if self.uneven:
            notes.append(
                f"Rows with some of the datasets only (their Average is over those): {', '.join(self.uneven)}."
            )
        if self.paper_table:
            if not self.cells_are_the_papers:
                notes.append("No paper comparison: these cells are not run as the paper's are.")
            elif self.absent.get("datasets") or self.uneven:
                notes.append("The paper's Average is compared only for rows with every dataset of the preset.")
        return notes

    def comparison(self, comparison: pd.DataFrame, stats: pd.DataFrame) -> pd.DataFrame:
        """The rows of the paper comparison whose cells are the paper's: none when the cells'
        settings or data differ; an Average row only for a method with results on every
        dataset the paper averages over (a method with no results keeps its row: the gap shows)."""
        if comparison.empty:
            return comparison
        if not self.cells_are_the_papers:
            return comparison.iloc[0:0]
        every = set(self.totals.get("paper_datasets") or self.totals.get("dataset_names") or [])
        shown = stats[(stats["dataset"] != "Average") & stats["mean"].notna()]
        ran = set(shown["method"])
        full = {m for m, part in shown.groupby("method") if every <= set(part["dataset"])}
        keep = (comparison["dataset"] != "Average") | comparison["method"].isin(full) | ~comparison["method"].isin(ran)
        return comparison[keep]


def paper_datasets(paper_table: str | None) -> list[str]:
    """The datasets the paper's table averages over: those of the shipped presets that
    reproduce it (the preset of the same name first)."""
    if not paper_table:
        return []
    names = sorted(available_presets(), key=lambda n: n != paper_table)
    for name in names:
        preset = load_preset(name)
        if preset.paper_table == paper_table:
            return [d["name"] for d in preset.datasets]
    return []


def table_scope(preset, shown, finished, overrides: dict[str, Any], partial: dict[str, str]) -> TableScope:
    """How the table of `finished` cells (of the preset's `shown` cells) differs from the preset's."""
    changed = {k: v for k, v in overrides.items() if k not in NEUTRAL_OVERRIDES}
    weights = ""
    preset_weights = preset.run.get("pretrained")
    used = sorted({str(c.config.pretrained) for c in shown})
    if preset_weights is not None and used != [str(preset_weights)]:
        said = ", ".join("none (random initialization)" if w in ("none", "None") else w for w in used)
        weights = f"{said} instead of the preset's {preset_weights}"
    names = {
        "datasets": [d["name"] for d in preset.datasets],
        "methods": [m.label for m in preset.methods],
        "seeds": list(preset.seeds),
    }
    have = {
        "datasets": {c.dataset for c in finished},
        "methods": {c.label for c in finished},
        "seeds": {c.config.seed for c in finished},
    }
    absent = {axis: [v for v in values if v not in have[axis]] for axis, values in names.items()}
    totals: dict[str, Any] = {axis: len(values) for axis, values in names.items()}
    totals["dataset_names"] = names["datasets"]
    totals["paper_datasets"] = paper_datasets(preset.paper_table)
    missing_paper = [d for d in totals["paper_datasets"] if d not in names["datasets"]]
    if missing_paper:  # the preset itself is smaller than the paper's table
        absent["datasets"] = list(dict.fromkeys([*absent["datasets"], *missing_paper]))
        totals["datasets"] = len(set(names["datasets"]) | set(totals["paper_datasets"]))
    needed = {d for c in shown for d in c.config.datasets + c.config.test_datasets}
    datasets_of: dict[str, set] = {}
    for cell in finished:
        datasets_of.setdefault(cell.label, set()).add(cell.dataset)
    uneven = [label for label, seen in datasets_of.items() if seen != have["datasets"]]
    extra_seeds = sorted(seed for seed in have["seeds"] if seed not in names["seeds"])
    return TableScope(
        changed,
        weights,
        {d: w for d, w in partial.items() if d in needed},
        absent,
        totals,
        preset.paper_table,
        uneven,
        extra_seeds,
    )
