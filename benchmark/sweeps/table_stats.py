"""A table's numbers and marks from the long rows of `benchmark.sweeps.tables.collect`.

`summarize` gives mean and std over seeds per dataset plus the 'Average' over datasets (each
run's HM is averaged, never the HM of averages: docs/protocols.md), failed cells as failures,
then `assess` marks what a reader should not miss: the best row of each column, the rows not
separated from it, the unstable runs and the rows of a wide spread over seeds.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd

from benchmark.protocol_registry import get_protocol
from benchmark.sweeps import statements
from benchmark.sweeps.presets import Cell

AVERAGE = "Average"
KEYS = ["label", "hyperparameters", "method", "dataset", "grid"]


def summarize(
    long: pd.DataFrame,
    failed: Sequence[Cell] = (),
    headline: Mapping[str, str] | None = None,
    margin: float = statements.MARGIN,
) -> pd.DataFrame:
    """Mean, std and count over seeds per (label, dataset, grid, metric), plus 'Average' rows:
    per seed the mean over datasets, then mean and std over seeds. `failed` cells turn their
    row (and its Average) into failures: mean and std NaN, `failed` = their number of seeds.
    Then `assess`: the best row of each column, the rows not distinguishable from it, the
    unstable runs and (given each dataset's `headline` metric, its protocol's) the rows of a
    wide spread."""
    columns = [*KEYS, "metric", "mean", "std", "n", "failed"]
    if long.empty:
        return assess(_mark_failed(pd.DataFrame(columns=columns), failed), long, headline, margin)
    per_dataset = _over_seeds(long)
    datasets = long["dataset"].unique()
    # 'Average' even for one dataset: the paper's numbers are averages and compare with it.
    # Only metrics every dataset reports (domain names differ between datasets).
    shared = long.groupby("metric")["dataset"].nunique()
    common = long[long["metric"].isin(shared[shared == len(datasets)].index)]
    complete = common.groupby(["label", "grid", "seed", "metric"])["dataset"].transform("nunique") == len(datasets)
    by_seed = (
        common[complete]
        .groupby(["label", "hyperparameters", "method", "grid", "seed", "metric"], as_index=False, sort=False)["value"]
        .mean()
    )
    by_seed["dataset"] = AVERAGE
    per_dataset = pd.concat([per_dataset, _over_seeds(by_seed)], ignore_index=True)
    per_dataset["failed"] = 0
    return assess(_mark_failed(per_dataset[columns], failed), long, headline, margin)


def _mark_failed(stats: pd.DataFrame, failed: Sequence[Cell]) -> pd.DataFrame:
    if not failed:
        return stats

    stats = stats.copy()
    for cell in failed:
        grid = cell.grid_text
        metrics = list(get_protocol(cell.config.protocol).metrics) or ["status"]
        for dataset in (cell.dataset, AVERAGE):
            for metric in metrics:
                here = (
                    (stats["label"] == cell.label)
                    & (stats["grid"] == grid)
                    & (stats["dataset"] == dataset)
                    & (stats["metric"] == metric)
                )
                if here.any():
                    stats.loc[here, "failed"] += 1
                else:
                    row = {
                        "label": cell.label,
                        "hyperparameters": cell.hyperparameters,
                        "method": cell.config.method,
                        "dataset": dataset,
                        "grid": grid,
                        "metric": metric,
                        "n": 0,
                        "failed": 1,
                    }
                    stats = pd.concat([stats, pd.DataFrame([row])], ignore_index=True)
    stats["failed"] = stats["failed"].fillna(0).astype(int)
    stats.loc[stats["failed"] > 0, ["mean", "std"]] = float("nan")
    return stats


def _over_seeds(long: pd.DataFrame) -> pd.DataFrame:
    grouped = long.groupby([*KEYS, "metric"], as_index=False, sort=False)["value"]
    stats = grouped.agg(mean="mean", std="std", n="count")
    stats["std"] = stats["std"].fillna(0.0)
    return stats


# -- what a reader should not miss: the best, the rows within noise of it, unstable runs ------
ZEROSHOT = "zeroshot"
HALF_OF_ZEROSHOT = 0.5
# A row whose headline metric varies this much (points of std over seeds) is flagged: at n = 3
# its mean is uncertain by more than the gaps a table is read for.
SPREAD_LIMIT = 5.0
ROW = ["label", "hyperparameters", "method"]
ASSESSMENT = [
    "best",
    "tied",
    "pairs",
    "diff_mean",
    "diff_low",
    "diff_high",
    "unstable",
    "unstable_reasons",
    "spread",
    "on_test",
]


def assess(
    stats: pd.DataFrame,
    long: pd.DataFrame,
    headline: Mapping[str, str] | None = None,
    margin: float = statements.MARGIN,
) -> pd.DataFrame:
    """`stats` with the columns of ASSESSMENT: per (dataset block, grid, metric) `best` (the
    highest mean; exact ties all best) and `tied` (not separated from the best: `_mark_best`;
    `pairs` its number of pairs, `diff_*` its mean and t interval); `unstable` (the number of the row's runs
    flagged by `unstable_runs`) with `unstable_reasons`; `spread` (the std over seeds of the
    row's `headline` metric -- dataset -> name, the Average block flagged when its datasets
    share one -- when it exceeds SPREAD_LIMIT, else 0, on every metric of the row); `on_test`
    (a run of the row reports the round it selected on its own test data: the authors' rule).
    Failed rows and rows selected on test are never best or tied."""
    stats = stats.copy()
    stats["best"], stats["tied"], stats["pairs"] = False, False, 0
    stats["diff_mean"], stats["diff_low"], stats["diff_high"] = float("nan"), float("nan"), float("nan")
    stats["unstable"], stats["unstable_reasons"], stats["spread"] = 0, "", 0.0
    stats["on_test"] = False
    if stats.empty or long.empty:
        return stats
    if "selected" in long.columns:
        on_test = long[long["selected"].fillna("final") != "final"][ROW].drop_duplicates()
        for row in on_test.itertuples(index=False):
            stats.loc[(stats[ROW] == pd.Series(dict(zip(ROW, row)))).all(axis=1), "on_test"] = True
    if headline:
        keys = [*ROW, "grid", "dataset"]
        datasets = [d for d in dict.fromkeys(stats["dataset"]) if d != AVERAGE]
        names = dict(headline)
        if len({names.get(d) for d in datasets}) == 1:
            names[AVERAGE] = names.get(datasets[0])
        wide = (stats["metric"] == stats["dataset"].map(names)) & (stats["n"] > 1) & (stats["std"] > SPREAD_LIMIT)
        # the headline's std, on every metric of its row
        by_row = stats["std"].where(wide).groupby([stats[k] for k in keys], sort=False, dropna=False)
        stats["spread"] = by_row.transform("max").fillna(0.0)
    _mark_best(stats, long, margin)
    flagged = unstable_runs(long)
    for key, runs in flagged.groupby([*ROW, "grid"], sort=False):
        here = (stats[[*ROW, "grid"]] == pd.Series(dict(zip([*ROW, "grid"], key)))).all(axis=1)
        for dataset, by_dataset in [*runs.groupby("dataset", sort=False), (AVERAGE, runs)]:
            rows = here & (stats["dataset"] == dataset)
            reasons = [
                f"{'' if dataset != AVERAGE else r.dataset + ' '}seed {r.seed}: {r.reasons}"
                for r in by_dataset.itertuples(index=False)
            ]
            stats.loc[rows, "unstable"] = len(by_dataset)
            stats.loc[rows, "unstable_reasons"] = "; ".join(reasons)
    return stats


def unstable_runs(long: pd.DataFrame) -> pd.DataFrame:
    """One row per flagged run (ROW, dataset, grid, seed, reasons). A run is unstable when its
    own summary says so (`unstable` of `collect`: its mean train loss rose from the first to
    the last round) or when one of its metrics is below half of the zero-shot row's on the
    same dataset, grid and seed -- the zero-shot row of the table (method `zeroshot`, the
    variant labelled so first), its mean over seeds when that seed did not run, over grid
    values too when zero-shot ran without the grid. A table without zero-shot checks the loss
    only; zero-shot's own rows are checked for the loss only."""
    columns = [*ROW, "dataset", "grid", "seed", "reasons"]
    runs = long.drop_duplicates([*ROW, "dataset", "grid", "seed"])[[*ROW, "dataset", "grid", "seed"]]
    reasons: dict[tuple, list[str]] = {tuple(r): [] for r in runs.itertuples(index=False)}
    if "unstable" in long.columns:
        for r in (
            long[long["unstable"].fillna("") != ""].drop_duplicates([*ROW, "dataset", "grid", "seed"]).itertuples()
        ):
            reasons[(r.label, r.hyperparameters, r.method, r.dataset, r.grid, r.seed)].append(r.unstable)
    zeroshot = long[long["method"] == ZEROSHOT]
    if not zeroshot.empty:
        labels = list(dict.fromkeys(zeroshot["label"]))
        zeroshot = zeroshot[zeroshot["label"] == (ZEROSHOT if ZEROSHOT in labels else labels[0])]
        exact = zeroshot.groupby(["dataset", "grid", "seed", "metric"])["value"].mean().to_dict()
        by_grid = zeroshot.groupby(["dataset", "grid", "metric"])["value"].mean().to_dict()
        by_dataset = zeroshot.groupby(["dataset", "metric"])["value"].mean().to_dict()
        for r in long[long["method"] != ZEROSHOT].itertuples(index=False):
            reference = exact.get(
                (r.dataset, r.grid, r.seed, r.metric),
                by_grid.get((r.dataset, r.grid, r.metric), by_dataset.get((r.dataset, r.metric))),
            )
            if reference is not None and r.value < HALF_OF_ZEROSHOT * reference:
                reasons[(r.label, r.hyperparameters, r.method, r.dataset, r.grid, r.seed)].append(
                    f"{r.metric} {r.value:.2f} is below half of zero-shot's {reference:.2f}"
                )
    flagged = [(*key, "; ".join(found)) for key, found in reasons.items() if found]
    return pd.DataFrame(flagged, columns=columns)


def _mark_best(stats: pd.DataFrame, long: pd.DataFrame, margin: float = statements.MARGIN) -> None:
    """`best`, `tied`, `pairs` and `diff_*` of `assess`, in place. Pairs: per dataset block
    the seeds both rows ran; in the Average block every (dataset, seed) both ran (the pairing
    of `differences`' 'all (seeds x datasets)'). `diff_*`: the mean of best minus the row and
    its 95 % t interval; `tied`: not separated from the best (`statements.marks`: paired
    t-test, Holm over the block's rows); fewer than 2 pairs give none, and only the best is
    marked."""
    ok = (stats["failed"] == 0) & stats["mean"].notna() & ~stats["on_test"].astype(bool)
    for (dataset, grid, metric), block in stats[ok].groupby(["dataset", "grid", "metric"], sort=False):
        top = block["mean"].max()
        best = block[block["mean"] == top]
        stats.loc[best.index, "best"] = True
        values = long[(long["grid"] == grid) & (long["metric"] == metric)]
        if dataset != AVERAGE:
            values = values[values["dataset"] == dataset]
        on = ["dataset", "seed"]
        reference = best.iloc[0]
        ours = values[(values[ROW] == reference[ROW]).all(axis=1)][[*on, "value"]]
        others, diffs = [], []
        for index, row in block.drop(best.index).iterrows():
            theirs = values[(values[ROW] == row[ROW]).all(axis=1)][[*on, "value"]]
            paired = ours.merge(theirs, on=on, suffixes=("_best", "_row"))
            others.append(index)
            diffs.append((paired["value_best"] - paired["value_row"]).to_numpy())
        shown = statements.marks(diffs, margin=margin)[0] if diffs else []
        for index, d, mark in zip(others, diffs, shown):
            low, high = statements.t_interval(d)
            stats.loc[index, ["pairs", "diff_mean", "diff_low", "diff_high"]] = [
                len(d),
                float(d.mean()) if len(d) else float("nan"),
                low,
                high,
            ]
            stats.loc[index, "tied"] = bool(len(d) >= 2 and mark != statements.SEPARATED)
