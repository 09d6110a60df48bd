"""Figures of a reproduced table: the radar of the paper's Fig. 1 and accuracy by round.

Every figure colours a method (row label) the same way (`method_colours`), keeps grid
values apart (one radar panel per grid value, one curve per label and grid value: never an
average over, e.g., shots), and has a title.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from benchmark.runs.results import is_complete, read_metrics
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.tables import AVERAGE, run_dir

# Per-round rows of metrics.csv that are bookkeeping, not accuracy.
NOT_ACCURACY = ("train_loss", "lr", "bytes_up", "bytes_down")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def radar_metrics(stats: pd.DataFrame) -> tuple[str, ...]:
    """Local, Base, Novel (or New, for the generalization protocols), HM."""
    novel = "New" if "New" in set(stats["metric"]) and "Novel" not in set(stats["metric"]) else "Novel"
    return ("Local", "Base", novel, "HM")


def radar_values(stats: pd.DataFrame, metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """What the radar draws: one row per table row (label, hyperparameters, grid) of the
    Average rows, or else the first dataset that has `metrics`; one column per metric: the
    table's own means."""
    metrics = tuple(metrics or radar_metrics(stats))
    having = stats[stats["metric"].isin(metrics)]["dataset"].unique()
    dataset = AVERAGE if AVERAGE in having else (having[0] if len(having) else None)
    part = stats[(stats["dataset"] == dataset) & stats["metric"].isin(metrics)]
    if part.empty:
        return pd.DataFrame(columns=list(metrics))
    table = part.pivot_table(index=["label", "hyperparameters", "grid"], columns="metric", values="mean", sort=False)
    table.attrs["dataset"] = dataset
    return table.reindex(columns=list(metrics))


def method_colours(labels: Sequence[str]) -> dict[str, tuple]:
    """One colour per row label, by its position in the table, shared by every figure."""
    plt = _pyplot()
    labels = list(dict.fromkeys(labels))
    palette = plt.get_cmap("tab10" if len(labels) <= 10 else "tab20").colors
    return {label: palette[i % len(palette)] for i, label in enumerate(labels)}


def radar(
    stats: pd.DataFrame,
    path: Path,
    colours: dict[str, tuple] | None = None,
    metrics: Sequence[str] | None = None,
) -> Path | None:
    """One polygon per table row (`radar_values`: the numbers of table.md) over `metrics`
    (default Local, Base, Novel or New, HM), one panel per grid value. Each axis spans its
    own range (the rows' min to max with a margin, printed on the axis), so methods a few
    points apart do not overlap."""
    values_by_row = radar_values(stats, metrics)
    if values_by_row.empty:
        return None
    dataset = values_by_row.attrs["dataset"]
    values_by_row = values_by_row.dropna(axis=1, how="all")
    metrics = list(values_by_row.columns)
    if len(metrics) < 3:
        return None
    labels = values_by_row.index.get_level_values("label")
    colours = colours or method_colours(labels)
    grids = list(dict.fromkeys(values_by_row.index.get_level_values("grid")))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(grids), figsize=(7.5 * len(grids), 6), subplot_kw={"polar": True}, squeeze=False)
    fig.subplots_adjust(wspace=0.6)
    angles = np.linspace(0, 2 * np.pi, len(metrics), endpoint=False).tolist()
    for ax, grid in zip(axes[0], grids):
        means = values_by_row.xs(grid, level="grid")
        low, high = means.min(), means.max()
        spans = {m: max(high[m] - low[m], 1.0) for m in metrics}
        lows = {m: max(0.0, low[m] - 0.25 * spans[m]) for m in metrics}  # the worst row near 20 % radius
        highs = {m: min(100.0, high[m] + 0.05 * spans[m]) for m in metrics}
        for (label, hyperparameters), row in means.iterrows():
            radius = [(float(row[m]) - lows[m]) / (highs[m] - lows[m]) for m in metrics]
            name = label if hyperparameters == "paper" else f"{label} ({hyperparameters})"
            ax.plot(angles + angles[:1], radius + radius[:1], label=name, color=colours.get(label))
            ax.fill(angles + angles[:1], radius + radius[:1], alpha=0.06, color=colours.get(label))
        ax.set_xticks(angles)
        ax.set_xticklabels([f"{m}\n[{lows[m]:.1f}, {highs[m]:.1f}]" for m in metrics])
        ax.tick_params(axis="x", pad=12)
        ax.set_yticklabels([])
        ax.set_ylim(0, 1)
        ax.set_title(
            f"{dataset}{f' ({grid})' if grid else ''}: each axis spans its own range", fontsize=10, pad=36
        )  # above the top axis label
        ax.legend(loc="upper right", bbox_to_anchor=(1.35, 1.1), fontsize=8)
    fig.suptitle(f"{' / '.join(metrics)} by method (mean over seeds)", y=1.1)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p")


def curve_looks(labels: Sequence[str]) -> dict[str, dict]:
    """Per label: its own marker, and a line and marker that shrink in drawing order, so a
    curve drawn later over an identical one (pFedMMA at zero-shot's numbers, say) leaves the
    earlier one showing around it instead of hiding it."""
    n = max(len(labels), 1)
    return {
        label: {
            "marker": MARKERS[i % len(MARKERS)],
            "linewidth": 3.5 - 2.5 * i / n,
            "ms": 8.0 - 5.0 * i / n,
            "zorder": 2 + i,
        }
        for i, label in enumerate(labels)
    }


def round_curves(cells: Sequence[Cell], path: Path, colours: dict[str, tuple] | None = None) -> Path | None:
    """Accuracy by round, one panel per metric: the over-clients value of every evaluated
    round, mean over seeds and datasets, one line per method label (and grid value)."""
    frames = []
    for cell in cells:
        folder = run_dir(cell)
        if not is_complete(folder):
            continue
        m = read_metrics(folder)
        m = m[(m["client"] < 0) & ~m["metric"].isin(NOT_ACCURACY)]
        if not m.empty:
            m = m.assign(label=cell.label, grid=", ".join(f"{k}={v}" for k, v in cell.grid))
            frames.append(m)
    if not frames:
        return None
    data = pd.concat(frames).groupby(["label", "grid", "metric", "round"], as_index=False, sort=False)["value"].mean()
    metrics = list(dict.fromkeys(data["metric"]))
    colours = colours or method_colours(data["label"])
    styles = {grid: style for grid, style in zip(dict.fromkeys(data["grid"]), ["-", "--", ":", "-."] * 10)}
    looks = curve_looks(list(dict.fromkeys(data["label"])))
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(1, len(metrics), figsize=(4.5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for (label, grid), rows in data[data["metric"] == metric].groupby(["label", "grid"], sort=False):
            ax.plot(
                rows["round"],
                rows["value"],
                color=colours.get(label),
                linestyle=styles[grid],
                **looks[label],
                label=f"{label} ({grid})" if grid else label,
            )
        ax.set_title(metric)
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy (%)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle("Accuracy by round (mean over clients, seeds and datasets)")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
