"""What a table's rows say against each other and against the papers.

`differences` pairs the headline method with each other row run by run (same dataset, grid
and seed) and gives the mean difference with its t interval, its mark and a sign-flip test
(`benchmark.sweeps.statements`); `rankings` ranks each block's rows on the headline metric
and marks every adjacent gap (≻ / ≈ / ?); `paper_comparison` sets our means beside the
papers' numbers.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from benchmark.sweeps import statements
from benchmark.sweeps.table_stats import AVERAGE


def paper_comparison(
    stats: pd.DataFrame, reference: pd.DataFrame, methods: Sequence[str] | None = None
) -> pd.DataFrame:
    """Our mean next to the paper's number for every paper row of the methods in the table:
    `methods` (the preset's), else those with results. A cell still to run shows as NaN so
    the gap is visible, never dropped. One row per grid value (a shots ablation compares
    each setting, never their average)."""
    columns = ["method", "hyperparameters", "dataset", "grid", "metric", "ours", "paper", "delta"]
    if reference.empty:
        return pd.DataFrame(columns=columns)
    ours = stats[stats["label"] == stats["method"]].rename(columns={"mean": "ours"})  # default variants only
    wanted = set(ours["method"]) | set(methods or ())
    reference = reference[reference["method"].isin(wanted)]
    merged = reference.merge(
        ours[["method", "hyperparameters", "dataset", "grid", "metric", "ours"]],
        on=["method", "dataset", "metric"],
        how="left",
    )
    merged["grid"] = merged["grid"].fillna("")
    merged["delta"] = merged["ours"] - merged["paper"]
    return merged[columns]


DIFFERENCE_COLUMNS = [
    "reference",
    "baseline",
    "grid",
    "dataset",
    "pairs",
    "mean_diff",
    "ci_low",
    "ci_high",
    "p_t",
    "p_holm",
    "mark",
    "seeds_needed",
    "p_signflip",
]


def differences(
    long: pd.DataFrame, reference: str, metric: str, alpha: float = statements.ALPHA, margin: float = statements.MARGIN
) -> pd.DataFrame:
    """`reference` minus every other row label on `metric`, paired run by run (same dataset,
    grid, seed). Per dataset and over all pairs (seeds x datasets): the number of pairs, the
    mean difference, its 95 % t interval, the two-sided paired t-test's p, its Holm-adjusted p
    over the baselines of that (grid, dataset), the mark of `benchmark.sweeps.statements`
    (≻ the reference above, ≺ below, ≈ equivalent, ? open) with the seeds an open one needs, and
    the exact sign-flip p (NaN below 6 pairs, where none can reach 0.05). With one pair there
    is no interval and no test (NaN), never a made-up one."""
    part = long[long["metric"] == metric]
    if part.empty or reference not in set(part["label"]):
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    keys = ["dataset", "grid", "seed"]
    ours = part[part["label"] == reference][[*keys, "value"]]
    families: dict[tuple[str, str], list[tuple[str, np.ndarray]]] = {}
    for baseline in dict.fromkeys(part["label"]):
        if baseline == reference:
            continue
        theirs = part[part["label"] == baseline][[*keys, "value"]]
        paired = ours.merge(theirs, on=keys, suffixes=("_ref", "_base"))
        paired["diff"] = paired["value_ref"] - paired["value_base"]
        for grid, by_grid in paired.groupby("grid", sort=False):
            groups = [(d, g["diff"].to_numpy()) for d, g in by_grid.groupby("dataset", sort=False)]
            if len(groups) > 1:
                groups.append(("all (seeds x datasets)", by_grid["diff"].to_numpy()))
            for dataset, diffs in groups:
                families.setdefault((grid, dataset), []).append((baseline, diffs))
    rows = []
    for (grid, dataset), family in families.items():
        # both directions: a baseline above the reference is marked ≺, never hidden as open
        gaps = statements.compare(
            [(reference, b, d) if d.mean() >= 0 else (b, reference, -d) for b, d in family], alpha, margin
        )
        for (baseline, diffs), gap in zip(family, gaps):
            above = gap.upper == reference
            rows.append(
                {
                    "reference": reference,
                    "baseline": baseline,
                    "grid": grid,
                    "dataset": dataset,
                    "pairs": len(diffs),
                    "mean_diff": float(diffs.mean()),
                    "ci_low": gap.low if above else -gap.high,
                    "ci_high": gap.high if above else -gap.low,
                    "p_t": gap.p,
                    "p_holm": gap.p_holm,
                    "mark": gap.mark if above or gap.mark != statements.SEPARATED else "≺",
                    "seeds_needed": gap.needed if gap.mark == statements.OPEN and len(diffs) >= 2 else None,
                    "p_signflip": gap.p_signflip,
                }
            )
    order = {b: k for k, b in enumerate(dict.fromkeys(part["label"]))}
    frame = pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)
    frame["_order"] = frame["baseline"].map(order)
    frame = frame.sort_values(["_order"], kind="stable").drop(columns="_order").reset_index(drop=True)
    frame["seeds_needed"] = frame["seeds_needed"].astype("Int64")
    frame.attrs["alpha"], frame.attrs["margin"] = alpha, margin
    return frame


def rankings(
    long: pd.DataFrame, headline: Mapping[str, str], alpha: float = statements.ALPHA, margin: float = statements.MARGIN
) -> dict[tuple[str, str], statements.Ranking]:
    """(dataset block, grid) -> the ranking of its rows on the block's headline metric
    (`statements.rank_statements`): per dataset paired by seed, the Average block by the
    per-seed mean over datasets (seeds that ran every dataset). A row whose value is the same
    on every seed it ran (2 or more: zero-shot on a fixed test set) is deterministic and pairs
    with every seed of its neighbour. Rows selected on test are left out, as from the marks."""
    if long.empty:
        return {}
    if "selected" in long.columns:
        long = long[long["selected"].fillna("final") == "final"]
    datasets = list(dict.fromkeys(long["dataset"]))
    metrics = {headline.get(d) for d in datasets}
    blocks: list[tuple[str, pd.DataFrame]] = []
    for dataset in datasets:
        blocks.append((dataset, long[(long["dataset"] == dataset) & (long["metric"] == headline.get(dataset))]))
    if len(metrics) == 1 and None not in metrics:
        common = long[long["metric"] == headline.get(datasets[0])]
        complete = common.groupby(["label", "grid", "seed"])["dataset"].transform("nunique") == len(datasets)
        average = common[complete].groupby(["label", "grid", "seed"], as_index=False, sort=False)["value"].mean()
        blocks.insert(0, (AVERAGE, average))
    out = {}
    for dataset, block in blocks:
        for grid, by_grid in block.groupby("grid", sort=False):
            values = {
                label: dict(zip(g["seed"], g["value"].astype(float)))
                for label, g in by_grid.groupby("label", sort=False)
            }
            constant = [r for r, v in values.items() if len(v) > 1 and np.ptp(list(v.values())) == 0]
            out[(dataset, grid)] = statements.rank_statements(values, alpha, margin, constant=constant)
    return out
