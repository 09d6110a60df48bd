"""Tables are pandas views over run folders: long rows in, pivots out.

`collect` reads every finished cell into long rows (one per run x metric); `summarize`
gives mean and std over seeds per dataset plus the 'Average' over datasets (each run's
HM is averaged, never the HM of averages: docs/protocols.md); `differences` pairs the headline
method with each other row run by run (same dataset, grid and seed) and gives the mean
difference with its t interval, its mark and a sign-flip test (`benchmark.sweeps.statements`);
`rankings` ranks each block's rows on the headline metric and marks every adjacent gap
(≻ / ≈ / ?); `render` writes Markdown, CSV and LaTeX. Every row says whether its hyperparameters are the paper's or `fedbench tune`'s.
A cell with no finished run is simply absent: `fedbench reproduce` fills it. A cell whose
last run failed (diverged, crashed) is shown as "failed" -- never as a number, and never as
the mean of the seeds that happened to work -- until a rerun succeeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from benchmark.files import atomic_write
from benchmark.protocol_registry import get_protocol
from benchmark.runs.identity import run_name
from benchmark.runs.results import is_complete, read_failure, read_summary, run_health
from benchmark.sweeps import statements
from benchmark.sweeps.presets import Cell

AVERAGE = "Average"
KEYS = ["label", "hyperparameters", "method", "dataset", "grid"]


def run_dir(cell: Cell) -> Path:
    if cell.folder is not None:
        return Path(cell.folder)
    return Path(cell.config.out) / run_name(cell.config)


# A table cell made of several runs (one per part of its protocol: a target domain) shows
# each run's headline under the part's name and, once every part has run, their unweighted mean.


def collect(cells: Sequence[Cell]) -> pd.DataFrame:
    """Long rows (label, hyperparameters, method, dataset, grid, seed, metric, value, unstable,
    selected) of the finished cells; `unstable` is the run's own reason to be flagged (its train
    loss rose: `benchmark.runs.results.training_health`), "" when it has none; `selected` is
    the run's round selection (`final`, or `best_local_test`: chosen on the data it reports)."""
    rows = []
    parts: dict[tuple, dict[str, float | None]] = {}  # (*KEYS, seed) -> part -> value
    part_metric: dict[tuple, str] = {}  # (*KEYS, seed) -> the headline its parts average
    part_reasons: dict[tuple, list[str]] = {}
    for cell in cells:
        grid = cell.grid_text
        key = {
            "label": cell.label,
            "hyperparameters": cell.hyperparameters,
            "method": cell.config.method,
            "dataset": cell.dataset,
            "grid": grid,
            "seed": cell.config.seed,
        }
        if cell.part:
            parts.setdefault(tuple(key.values()), {})[cell.part] = None
            part_metric[tuple(key.values())] = get_protocol(cell.config.protocol).headline
        folder = run_dir(cell)
        summary = read_summary(folder) if (folder / "summary.json").is_file() else None
        if summary is None:
            continue
        metrics = summary["metrics"]
        selected = summary.get("select_round", "final")
        unstable = "; ".join(run_health(folder, summary)["reasons"])
        if cell.part:
            headline = part_metric[tuple(key.values())]
            parts[tuple(key.values())][cell.part] = float(metrics[headline])
            metrics = {cell.part: metrics[headline]}
            if unstable:
                part_reasons.setdefault(tuple(key.values()), []).append(f"{cell.part}: {unstable}")
        rows.extend(
            {**key, "metric": metric, "value": float(value), "unstable": unstable, "selected": selected}
            for metric, value in metrics.items()
        )
    for key, values in parts.items():
        if all(v is not None for v in values.values()):
            rows.append(
                {
                    **dict(zip(KEYS + ["seed"], key)),
                    "metric": part_metric[key],
                    "value": sum(values.values()) / len(values),
                    "unstable": "; ".join(part_reasons.get(key, [])),
                    "selected": "final",
                }
            )
    return pd.DataFrame(rows, columns=[*KEYS, "seed", "metric", "value", "unstable", "selected"])


def numerics_context(folder: Path) -> tuple[str, str, str]:
    """(torch threads, device kind, precision) a finished run computed under: the three
    things besides the code that move its last bits (FedMVP's and FedTPG's results differ
    between thread counts). The device kind of a CPU run names the kernels torch chose
    (`cpu (AVX512)`): AVX2 kernels gave PromptFL's toy run other digits. Read from
    environment.json (threads, the GPU's name, the CPU's kernels) and summary.json (the
    device and precision actually used), falling back to config.yaml's settings; "?" where
    a folder does not say."""
    folder = Path(folder)

    def read(name: str, parse) -> dict:
        try:
            return parse((folder / name).read_text()) or {}
        except (OSError, ValueError, yaml.YAMLError):
            return {}

    environment, summary = read("environment.json", json.loads), read("summary.json", json.loads)
    config = read("config.yaml", yaml.safe_load)
    threads = environment.get("torch_threads")
    device = str(summary.get("device") or config.get("device") or "?")
    kind = str(environment.get("device_name") or device.split(":")[0])
    if kind == "cpu" and environment.get("cpu_capability"):
        kind = f"cpu ({environment['cpu_capability']})"
    precision = str(summary.get("precision") or config.get("precision") or "?")
    return (f"{threads} torch threads" if threads is not None else "? torch threads", kind, precision)


def cell_name(cell: Cell) -> str:
    """How a note names one run of a table."""
    grid = cell.grid_text
    where = cell.dataset + (f" ({grid})" if grid else "") + (f", target {cell.part}" if cell.part else "")
    return f"{cell.label} on {where}, seed {cell.config.seed}"


def numerics_note(cells: Sequence[Cell]) -> str | None:
    """The table's numerics context (`numerics_context`): the one its finished runs share,
    or, when they come from several, each with the runs computed under it (the most common
    one by count only). None when no run finished."""
    by_context: dict[tuple[str, str, str], list[str]] = {}
    for cell in cells:
        folder = run_dir(cell)
        if is_complete(folder):
            by_context.setdefault(numerics_context(folder), []).append(cell_name(cell))
    if not by_context:
        return None
    if len(by_context) == 1:
        (context,) = by_context
        return (
            f"Numerics: every run computed under {', '.join(context)}. Another thread count, device, precision "
            "or set of CPU kernels can move the digits (docs/toy-world.md, What a table depends on)."
        )
    ranked = sorted(by_context.items(), key=lambda item: (-len(item[1]), item[0]))
    (common, common_runs), others = ranked[0], ranked[1:]
    listed = "; ".join(f"{', '.join(context)}: {', '.join(runs)}" for context, runs in others)
    return (
        f"Numerics: these runs come from {len(by_context)} numerics contexts (torch threads, device, precision), "
        f"which can move a result's last digits. {len(common_runs)} ran under {', '.join(common)}; the others: "
        f"{listed}."
    )


def failed_cells(cells: Sequence[Cell]) -> list[Cell]:
    """The cells with no finished run whose last run failed."""
    return [c for c in cells if not is_complete(run_dir(c)) and read_failure(run_dir(c)) is not None]


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


def seeds_note(long: pd.DataFrame) -> list[str]:
    """The seeds behind the table's rows, as one note: 'Seeds: 1–3 (every row).' or, when rows
    ran different seeds (`fedbench reproduce --until-resolved`), each set with its rows."""
    if long.empty:
        return []
    by_row = long.groupby("label", sort=False)["seed"].agg(lambda seeds: tuple(sorted(set(seeds))))
    groups: dict[tuple, list[str]] = {}
    for label, seeds in by_row.items():
        groups.setdefault(seeds, []).append(label)

    def text(seeds: tuple) -> str:
        contiguous = len(seeds) > 2 and seeds[-1] - seeds[0] == len(seeds) - 1
        return f"{seeds[0]}–{seeds[-1]}" if contiguous else ", ".join(map(str, seeds))

    if len(groups) == 1:
        return [f"Seeds: {text(next(iter(groups)))} (every row)."]
    return ["Seeds: " + "; ".join(f"{text(seeds)}: {', '.join(labels)}" for seeds, labels in groups.items()) + "."]


def ranking_table(ranking: statements.Ranking) -> pd.DataFrame:
    """The rows of a ranking as the table prints them: rank by mean, the 95 % rank interval,
    n, the mean with its 95 % t interval, and the mark to the next row with P(beats next)."""
    rows = []
    for k, row in enumerate(ranking.rows):
        gap = ranking.gaps[k] if k < len(ranking.gaps) else None
        interval = "" if np.isnan(ranking.low[k]) else f" [{ranking.low[k]:.2f}, {ranking.high[k]:.2f}]"
        rows.append(
            {
                "rank": k + 1,
                "label": row,
                "rank interval": f"{ranking.rank_low[k]}–{ranking.rank_high[k]}",
                "n": ranking.n[k],
                "mean [95 % t]": f"{ranking.means[k]:.2f}{interval}",
                "vs next": gap.text() if gap else "",
                "P(beats next)": f"{gap.beats:.2f} [{gap.beats_low:.2f}, {gap.beats_high:.2f}]" if gap else "",
            }
        )
    return pd.DataFrame(rows).set_index("rank")


def wide(stats: pd.DataFrame, dataset: str, marks: bool = False) -> pd.DataFrame:
    """Rows = method label (+ grid), columns = metrics, cells 'mean ± std'. With `marks` (and
    the columns of `assess`): the best cell of a column in bold, a column `n` (seeds behind the row's means) first, and a column
    `unstable` when a row of the block is flagged: ‡ and the number of its unstable runs, §
    and the std of a wide spread, ¶ when its tuned value was flagged by `fedbench tune` (the
    `tuning` column), and a column `round` when a row reports the round it selected on test."""
    part = stats[stats["dataset"] == dataset].copy()
    marked = marks and "best" in part.columns
    part["cell"] = [_fmt(m, s, n, f) for m, s, n, f in zip(part["mean"], part["std"], part["n"], part["failed"])]
    if marked:
        part["cell"] = [f"**{c}**" if b else c for c, b in zip(part["cell"], part["best"])]
    index = ["label", "hyperparameters", "grid"] if (part["grid"] != "").any() else ["label", "hyperparameters"]
    table = part.pivot_table(index=index, columns="metric", values="cell", aggfunc="first", sort=False)
    table = table[[m for m in dict.fromkeys(part["metric"]) if m in table.columns]]
    table.columns.name = None
    if marked:
        rows = part.groupby(index, sort=False)
        counts = rows["n"].agg(["min", "max"]).reindex(table.index)
        table.insert(0, "n", [_n_text(lo, hi) for lo, hi in zip(counts["min"], counts["max"])])
        flagged = rows["unstable"].max().reindex(table.index)
        spread = rows["spread"].max().reindex(table.index)
        tuning = (rows["tuning"].max() if "tuning" in part.columns else pd.Series("", index=spread.index)).reindex(
            table.index
        )
        if (flagged > 0).any() or (spread > 0).any() or (tuning.fillna("") != "").any():
            table["unstable"] = [
                ", ".join(
                    ([f"‡ {k} run{'s' if k > 1 else ''}"] if k > 0 else [])
                    + ([f"§ std {sd:.2f}"] if sd > 0 else [])
                    + (["¶ tuning"] if isinstance(tf, str) and tf else [])
                )
                for k, sd, tf in zip(flagged, spread, tuning)
            ]
        on_test = rows["on_test"].max().reindex(table.index) if "on_test" in part.columns else None
        if on_test is not None and on_test.astype(bool).any():
            table["round"] = ["selected on test" if t else "final" for t in on_test.astype(bool)]
    return table


def _n_text(low: int, high: int) -> str:
    """The number of seeds behind a row ('–' for a row with no finished seed)."""
    low, high = int(low), int(high)
    return "–" if high == 0 else (str(high) if low == high else f"{low}–{high}")


def block_notes(part: pd.DataFrame, dataset: str) -> list[str]:
    """What the marks of one block mean and the n behind them, and every unstable row with its
    reasons (plain text; `render` writes them under the block in table.md and table.tex)."""
    if "best" not in part.columns or part.empty:
        return []
    notes = []
    pairing = "seeds x datasets" if dataset == AVERAGE else "seeds"
    compared = part[~part["best"] & (part["failed"] == 0) & part["mean"].notna()]
    if not compared.empty:
        pairs = sorted(set(compared["pairs"].astype(int)))
        shown = str(pairs[0]) if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}"
        if pairs[-1] < 2:
            notes.append(
                f"Bold: the best mean of its column. With n = {shown} pair ({pairing}) no interval exists, so no "
                "other row is marked as indistinguishable from the best: compare these numbers with care."
            )
        else:
            notes.append(
                f"Bold: the best mean of its column; n = {shown} pairs ({pairing}) with it. Which rows it is "
                "separated from: the ranking below (headline metric) and table.csv's `tied` (not separated from the "
                "best by the paired t-test, Holm-corrected over the block's rows; every metric)."
            )
    elif part["best"].any():
        notes.append("Bold: the best mean of its column.")
    unstable = part[part["unstable"] > 0].drop_duplicates(["label", "hyperparameters", "grid"])
    for row in unstable.itertuples(index=False):
        notes.append(f"‡ unstable: {_row_name(row)}, {row.unstable_reasons}.")
    if not unstable.empty:
        notes.append(
            "‡ unstable = a run whose mean train loss ended above its first round's, or whose accuracy is below half "
            "of zero-shot's on the same dataset and seed; its numbers are shown (and averaged) as they are."
        )
    if "tuning" in part.columns:
        for row in (
            part[part["tuning"].fillna("") != ""]
            .drop_duplicates(["label", "hyperparameters", "grid"])
            .itertuples(index=False)
        ):
            notes.append(f"¶ tuning: {_row_name(row)}: `fedbench tune` flagged its value: {row.tuning} (tuning.md).")
    on_test = part[part["on_test"].astype(bool)] if "on_test" in part.columns else part.iloc[0:0]
    for row in on_test.drop_duplicates(["label", "hyperparameters", "grid"]).itertuples(index=False):
        notes.append(
            f"selected on test: {_row_name(row)} reports, per run, the round with the best mean Local on the test "
            "split it is scored on (the official code's rule); it is never bold or tied against final-round rows."
        )
    wide_spread = part[part["spread"] > 0].drop_duplicates(["label", "hyperparameters", "grid"])
    for row in wide_spread.itertuples(index=False):
        notes.append(
            f"§ spread: {_row_name(row)}, std {row.spread:.2f} over seeds of the headline metric, above "
            f"{SPREAD_LIMIT:g} points: its mean moves with the draw more than most gaps between rows (the run "
            "folders hold each seed's numbers)."
        )
    return notes


def _row_name(row) -> str:
    """How a block's note names a table row: 'label (hyperparameters) grid'."""
    return " ".join(x for x in (row.label, f"({row.hyperparameters})", row.grid) if x)


def _fmt(mean: float, std: float, n: int, failed: int = 0) -> str:
    if failed:
        return f"failed ({failed} of {n + failed} seeds)" if n else "failed"
    return f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f}"


def render(
    stats: pd.DataFrame,
    comparison: pd.DataFrame,
    out_dir: Path,
    title: str,
    diffs: pd.DataFrame | None = None,
    notes: Sequence[str] = (),
    ranks: Mapping[tuple[str, str], statements.Ranking] | None = None,
) -> dict[str, Path]:
    """Write table.md, table.csv (long stats, with the columns of `assess`), table.tex,
    paper_comparison.csv and differences.csv (`differences`); `notes` are lines printed under
    the title; each block's marks are explained under it (`block_notes`); `ranks` (`rankings`)
    give the statements above the tables and each block's ranking under its table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    datasets = list(dict.fromkeys(stats["dataset"]))
    order = ([AVERAGE] if AVERAGE in datasets else []) + [d for d in datasets if d != AVERAGE]
    md = [
        f"# {title}",
        "",
        "Mean ± std over seeds (n = number of seeds; one seed shows no ±); bold = best, ‡ = unstable, § = a wide spread over seeds (each block's notes say how, with the n behind them); Average = per-seed mean over datasets "
        "(HM averaged per run); failed = a run of the cell failed (`fedbench reproduce` retries it). "
        "hyperparameters: paper = the method's defaults (and the preset's run settings), "
        "tuned = chosen by `fedbench tune` on validation data, name=value = set by the preset.",
        "",
        *notes,
        *([""] if notes else []),
    ]
    ranks = ranks or {}
    if ranks:
        md += [
            "What the seeds support (headline metric; ≻ separated, ≈ equivalent, ? open: docs/reading-a-row.md):",
            "",
        ]
        md += [f"- {dataset}{f' ({grid})' if grid else ''}: {r.headline()}" for (dataset, grid), r in ranks.items()]
        md += [""]
    tex = []
    for dataset in order:
        part = stats[stats["dataset"] == dataset]
        table = wide(stats, dataset, marks=True)
        notes_here = block_notes(part, dataset)
        md += [f"## {dataset}", "", markdown_table(table), "", *notes_here, *([""] if notes_here else [])]
        for (block, grid), ranking in ranks.items():
            if block == dataset:
                pairing = "seeds (each seed's mean over datasets)" if dataset == AVERAGE else "seeds"
                md += [
                    f"### Ranking of {dataset}{f' ({grid})' if grid else ''}",
                    "",
                    markdown_table(ranking_table(ranking)),
                    "",
                    statements.method_note(ranking, pairing),
                    "",
                ]
        tex.append(latex_table(part, f"{title}: {dataset}", marks=True))
    if diffs is not None and not diffs.empty:
        reference = diffs["reference"].iloc[0]
        md += [
            f"## {reference} minus each baseline",
            "",
            "Paired run by run (same dataset, grid and seed); interval: 95 % t interval of the mean difference; "
            f"p_t: two-sided paired t-test, p_holm: Holm-adjusted over the baselines; mark: ≻ {reference} above, "
            f"≺ below (at alpha {diffs.attrs.get('alpha', statements.ALPHA):g}), ≈ equivalent within {statements.points(diffs.attrs.get('margin', statements.MARGIN))} (TOST), ? open with the seeds it needs at "
            f"{statements.POWER * 100:g} % power; p_signflip: exact sign-flip test, empty below "
            f"{statements.SIGNFLIP_MIN_PAIRS} pairs (its smallest p, 2/2^n, cannot reach 0.05 there). One pair "
            "gives no interval and no test.",
            "",
            markdown_table(diffs.drop(columns=["reference"]).round(2).set_index(["baseline", "grid", "dataset"])),
            "",
        ]
    if not comparison.empty:
        shown = comparison if (comparison["grid"] != "").any() else comparison.drop(columns="grid")
        md += ["## Paper comparison", "", markdown_table(shown.round(2).set_index(["method", "dataset", "metric"])), ""]
    paths = {"md": out_dir / "table.md", "csv": out_dir / "table.csv", "tex": out_dir / "table.tex"}
    atomic_write(paths["md"], "\n".join(md))
    atomic_write(paths["csv"], stats.to_csv(index=False))
    atomic_write(paths["tex"], "\n".join(tex))
    if not comparison.empty:
        paths["paper"] = out_dir / "paper_comparison.csv"
        atomic_write(paths["paper"], comparison.to_csv(index=False))
    if diffs is not None and not diffs.empty:
        paths["differences"] = out_dir / "differences.csv"
        atomic_write(paths["differences"], diffs.to_csv(index=False))
    return paths


def latex_table(part: pd.DataFrame, caption: str, marks: bool = False) -> str:
    """A booktabs table ready to paste: one header row, right-aligned numbers, the best mean
    of each column in bold (ties all bold), a failed cell as `failed` (never a number), a
    column saying paper/tuned/the preset's values when any row is not the paper's, the caption escaped for LaTeX. With
    `marks` (and the columns of `assess`): bold is `assess`'s best, $^\\ddagger$ an unstable row's label, a column $n$ (seeds)
    follows the method, and the notes of `block_notes` follow the tabular."""
    marked = marks and "best" in part.columns
    metrics = list(dict.fromkeys(part["metric"]))
    has_grid = (part["grid"] != "").any()
    has_tuned = (part["hyperparameters"] != "paper").any()
    keys = ["label", "hyperparameters", "grid"]
    rows = list(dict.fromkeys(zip(*(part[k] for k in keys))))
    best = {m: part.loc[(part["metric"] == m) & (part["failed"] == 0), "mean"].max() for m in metrics}
    header = [
        "Method",
        *(["Hyperparameters"] if has_tuned else []),
        *(["Setting"] if has_grid else []),
        *(["$n$"] if marked else []),
        *metrics,
    ]
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{latex_escape(caption)}}}",
        f"\\begin{{tabular}}{{l{'l' if has_tuned else ''}{'l' if has_grid else ''}{'r' if marked else ''}"
        f"{'r' * len(metrics)}}}",
        "\\toprule",
        " & ".join(h if h == "$n$" else latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    for label, hyperparameters, grid in rows:
        here = part[(part["label"] == label) & (part["hyperparameters"] == hyperparameters) & (part["grid"] == grid)]
        flagged = marked and (here["unstable"] > 0).any()
        spread = marked and (here["spread"] > 0).any()
        cells = [
            latex_escape(label) + ("$^\\ddagger$" if flagged else "") + ("$^\\S$" if spread else ""),
            *([latex_escape(hyperparameters)] if has_tuned else []),
            *([latex_escape(grid)] if has_grid else []),
            *([latex_escape(_n_text(here["n"].min(), here["n"].max()))] if marked else []),
        ]
        for metric in metrics:
            row = here[here["metric"] == metric]
            if row.empty:
                cells.append("--")
                continue
            mean, std, n, failed = row[["mean", "std", "n", "failed"]].iloc[0]
            if failed:
                cells.append(latex_escape(_fmt(mean, std, n, failed)))
                continue
            text = f"{mean:.2f}" + (f" $\\pm$ {std:.2f}" if n > 1 else "")
            is_best = bool(row["best"].iloc[0]) if marked else round(mean, 2) == round(best[metric], 2)
            cells.append(f"\\textbf{{{text}}}" if is_best else text)
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if marked:
        notes = block_notes(part, str(part["dataset"].iloc[0])) if not part.empty else []
        for note in notes:
            text = latex_escape(note).replace("‡", "$^\\ddagger$").replace("§", "\\S{}")
            lines.append(f"\\par\\smallskip{{\\footnotesize {text}}}")
    lines += ["\\end{table}", ""]
    return "\n".join(lines)


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "`": "",
}


def latex_escape(text: str) -> str:
    """Plain text for LaTeX; backticks (Markdown code marks in preset titles) are dropped."""
    return "".join(LATEX_SPECIALS.get(c, c) for c in str(text))


def client_spread_table(cells: Sequence[Cell]) -> pd.DataFrame:
    """Per row, dataset and metric, what the mean over clients hides (summary.json's `spread`):
    `client_std`, the std across clients averaged over seeds, and the worst client of any
    seed (`worst`, its `seed` and `client`). Empty when no finished run has a spread."""
    rows = []
    for cell in cells:
        folder = run_dir(cell)
        summary = read_summary(folder) if (folder / "summary.json").is_file() else None
        for metric, entry in ((summary or {}).get("spread") or {}).items():
            rows.append(
                {
                    "label": cell.label,
                    "hyperparameters": cell.hyperparameters,
                    "grid": cell.grid_text,
                    "dataset": f"{cell.dataset}/{cell.part}" if cell.part else cell.dataset,
                    "metric": metric,
                    "seed": cell.config.seed,
                    "std": float(entry["std"]),
                    "client": int(entry["worst_client"]),
                    "worst": float(entry["worst"]),
                }
            )
    if not rows:
        return pd.DataFrame()
    frame = pd.DataFrame(rows)
    keys = ["label", "hyperparameters", "grid", "dataset", "metric"]
    out = []
    for key, group in frame.groupby(keys, sort=False):
        worst = group.sort_values(["worst", "seed", "client"]).iloc[0]
        out.append(
            {
                **dict(zip(keys, key)),
                "n": len(group),
                "client_std": group["std"].mean(),
                "worst": worst["worst"],
                "worst_seed": int(worst["seed"]),
                "worst_client": int(worst["client"]),
            }
        )
    return pd.DataFrame(out)


def render_spread(spread: pd.DataFrame, out_dir: Path, title: str) -> dict[str, Path]:
    """spread.md and spread.csv beside the table: the clients behind each mean."""
    shown = spread if (spread["grid"] != "").any() else spread.drop(columns="grid")
    md = [
        f"# {title}: spread across clients",
        "",
        "The table's numbers are means over clients. Here, per row, dataset and metric: client_std = the "
        "standard deviation across clients (mean over the n seeds), worst = the lowest client's value of any "
        "seed, with that seed and client id. Per run: `fedbench runs RUN_FOLDERS --spread`.",
        "",
        markdown_table(shown.round(2).set_index(["label", "dataset", "metric"])),
        "",
    ]
    paths = {"spread_md": out_dir / "spread.md", "spread": out_dir / "spread.csv"}
    atomic_write(paths["spread_md"], "\n".join(md))
    atomic_write(paths["spread"], spread.to_csv(index=False))
    return paths


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub Markdown table without the optional `tabulate` dependency."""
    frame = table.reset_index()
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])
