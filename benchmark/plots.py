"""Figures of a reproduced table: the radar of the paper's Fig. 1 and per-round curves."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from benchmark.presets import Cell
from benchmark.results import is_complete, read_metrics
from benchmark.tables import AVERAGE, run_dir


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


def radar(stats: pd.DataFrame, path: Path, metrics: Sequence[str] | None = None) -> Path | None:
    """One polygon per table row over `metrics` (`radar_values`: the numbers of table.md)."""
    metrics = tuple(metrics or radar_metrics(stats))
    values_by_row = radar_values(stats, metrics)
    if values_by_row.empty:
        return None
    dataset = values_by_row.attrs["dataset"]
    plt = _pyplot()
    angles = np.linspace(0, 2 * np.pi, len(metrics), endpoint=False).tolist()
    fig, ax = plt.subplots(figsize=(6, 6), subplot_kw={"polar": True})
    for (label, hyperparameters, grid), row in values_by_row.iterrows():
        values = [float(row[m]) for m in metrics]
        name = f"{label} ({hyperparameters}{', ' + grid if grid else ''})"
        ax.plot(angles + angles[:1], values + values[:1], label=name)
        ax.fill(angles + angles[:1], values + values[:1], alpha=0.08)
    ax.set_xticks(angles)
    ax.set_xticklabels(metrics)
    ax.set_ylim(0, 100)
    ax.legend(loc="upper right", bbox_to_anchor=(1.35, 1.1), fontsize=8)
    ax.set_title(f"{' / '.join(metrics)} ({dataset})")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def round_curves(cells: Sequence[Cell], path: Path, metric: str = "train_loss") -> Path | None:
    """Mean over clients and seeds of `metric` per round, one line per (method, dataset)."""
    frames = []
    for cell in cells:
        folder = run_dir(cell)
        if not is_complete(folder):
            continue
        m = read_metrics(folder)
        m = m[(m["metric"] == metric) & (m["client"] >= 0)]
        if not m.empty:
            per_round = m.groupby("round", as_index=False)["value"].mean()
            per_round["line"] = f"{cell.label} / {cell.dataset}"
            frames.append(per_round)
    if not frames:
        return None
    data = pd.concat(frames).groupby(["line", "round"], as_index=False)["value"].mean()
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for line, rows in data.groupby("line", sort=False):
        ax.plot(rows["round"], rows["value"], marker="o", ms=3, label=line)
    ax.set_xlabel("round")
    ax.set_ylabel(f"{metric} (mean over clients)")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
