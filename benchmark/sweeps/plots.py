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

from benchmark.files import atomic_figure
from benchmark.runs.results import is_complete, read_metrics
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.table_stats import AVERAGE
from benchmark.sweeps.tables import run_dir

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


# Colours of the row labels, in table order: tab10's ten hues, then four a reader tells apart
# from them (black, maroon, navy, magenta; each at least 25 CIELAB units from every other
# colour here, `tests/sweeps/test_plots.py`). tab20, used before for more than ten methods, pairs
# each hue with a pale copy of it (promptfl/zeroshot, fedclip/fedmaple read as one method).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#000000", "#800000", "#000075", "#f032e6",
)  # fmt: skip
# Past tab10, a label's line is also dashed (its colour is nearer one of tab10's), and past
# the palette the colours come round again with another dash pattern.
DASHES = ("-", "--", ":", "-.")


def method_colours(labels: Sequence[str]) -> dict[str, str]:
    """One colour per row label, by its position in the table, shared by every figure."""
    labels = list(dict.fromkeys(labels))
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


def method_dashes(labels: Sequence[str]) -> dict[str, str]:
    """The radar's line style per row label: solid for tab10's colours, dashed for the four
    after them, then another pattern each time the colours come round again."""
    labels = list(dict.fromkeys(labels))
    return {label: DASHES[(i >= 10) + i // len(PALETTE)] for i, label in enumerate(labels)}


def shared_range(values: np.ndarray) -> tuple[float, float]:
    """One radial range for every axis of a radar panel, widened to whole multiples of 5
    within [0, 100]. With one range a ring means the same accuracy on every axis: 66.25 on
    one axis and 65.83 on another sit side by side, not on the outer ring and at the centre.
    The centre lies twice the values' spread (at least 20 points) below the lowest value, so
    the gap between two rows takes at most a third of the radius: a centre just under the
    lowest value (55 for two runs at 58-62) drew a 4-point gap across the whole radius."""
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    span = max(high - low, 10.0)
    return max(0.0, 5 * np.floor((low - 2 * span) / 5)), min(100.0, 5 * np.ceil((high + 0.05 * span) / 5))


def radar(
    stats: pd.DataFrame,
    path: Path,
    colours: dict[str, str] | None = None,
    metrics: Sequence[str] | None = None,
) -> Path | None:
    """One polygon per table row (`radar_values`: the numbers of table.md) over `metrics`
    (default Local, Base, Novel or New, HM), one panel per grid value. Every axis of a panel
    spans the same range (`shared_range`, its rings labelled), and the legend sits below the
    panels, clear of every axis label."""
    fig = radar_figure(stats, colours, metrics)
    if fig is None:
        return None
    atomic_figure(fig, path, dpi=120, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def radar_figure(stats: pd.DataFrame, colours: dict[str, str] | None = None, metrics: Sequence[str] | None = None):
    """`radar`'s figure (None when there is nothing to draw), left open."""
    values_by_row = radar_values(stats, metrics)
    if values_by_row.empty:
        return None
    dataset = values_by_row.attrs["dataset"]
    values_by_row = values_by_row.dropna(axis=1, how="all")
    metrics = list(values_by_row.columns)
    if len(metrics) < 3:
        return None
    labels = list(dict.fromkeys(values_by_row.index.get_level_values("label")))
    colours = colours or method_colours(labels)
    dashes = method_dashes(list(colours) if set(labels) <= set(colours) else labels)
    grids = list(dict.fromkeys(values_by_row.index.get_level_values("grid")))
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(grids), figsize=(6.5 * len(grids), 6.5), subplot_kw={"polar": True}, squeeze=False)
    fig.subplots_adjust(wspace=0.45)
    angles = np.linspace(0, 2 * np.pi, len(metrics), endpoint=False).tolist()
    handles: dict[str, object] = {}
    for ax, grid in zip(axes[0], grids):
        means = values_by_row.xs(grid, level="grid")
        low, high = shared_range(means[metrics].to_numpy(dtype=float))
        for (label, hyperparameters), row in means.iterrows():
            radius = [float(row[m]) for m in metrics]
            name = label if hyperparameters == "paper" else f"{label} ({hyperparameters})"
            (line,) = ax.plot(
                angles + angles[:1],
                radius + radius[:1],
                label=name,
                color=colours.get(label),
                linestyle=dashes.get(label, "-"),
                marker="o",
                ms=3,
                linewidth=1.6,
            )
            ax.fill(angles + angles[:1], radius + radius[:1], alpha=0.03, color=colours.get(label))
            handles.setdefault(name, line)
        _radar_axes(ax, angles, metrics, low, high)
        ax.set_title(
            f"{dataset}{f' ({grid})' if grid else ''}: accuracy (%), {low:g} at the centre", fontsize=10, pad=28
        )
    columns = min(4, max(1, (len(handles) + 3) // 4))
    fig.legend(
        list(handles.values()),
        [_wrapped(name) for name in handles],
        loc="upper center",
        bbox_to_anchor=(0.5, 0.02),
        ncol=columns,
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(f"{' / '.join(metrics)} by method (mean over seeds)", y=1.06)
    return fig


def _radar_axes(ax, angles: list[float], metrics: Sequence[str], low: float, high: float) -> None:
    """A radar panel's axes: one spoke per metric, [low, high] from the centre out, at most 5
    rings at round numbers, their labels between the first two spokes."""
    ax.set_xticks(angles)
    ax.set_xticklabels(metrics, fontsize=11)
    ax.tick_params(axis="x", pad=10)
    ax.set_ylim(low, high)
    step = next(d for d in (2, 5, 10, 20, 25) if (high - low) / d <= 5)  # at most 5 rings, round numbers
    rings = [r for r in np.arange(np.ceil(low / step) * step, high + 1e-9, step) if r > low]
    ax.set_yticks(rings)
    ax.set_yticklabels([f"{r:g}" for r in rings], fontsize=8, color="0.35")
    ax.set_rlabel_position(180 / len(metrics))  # between the first two axes, on no polygon's vertex


LEGEND_CHARS = 40  # a legend entry wider than this wraps: a long label must not widen the figure


def _wrapped(label: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(label, LEGEND_CHARS, break_on_hyphens=False)) or label


MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p", "d", "H", "8")


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


CURVE_COLUMNS = 4
MIN_SPAN = 10.0  # accuracy points the y-axis spans at least: a 0.4-point wiggle must not look like a cliff


def y_range(values: Sequence[float]) -> tuple[float, float]:
    """The y-axis of an accuracy panel: the values with a margin, at least MIN_SPAN points
    tall (centred on them), within [0, 100]."""
    low, high = float(np.nanmin(values)), float(np.nanmax(values))
    margin = max(0.05 * (high - low), (MIN_SPAN - (high - low)) / 2, 0.0)
    low, high = low - margin, high + margin
    if low < 0:
        low, high = 0.0, min(100.0, high - low)
    if high > 100:
        low, high = max(0.0, low - (high - 100)), 100.0
    return low, high


def what_is_averaged(cells: Sequence[Cell]) -> str:
    """The curves' title: a single run by its method, dataset and seed; else what the
    values are means over (clients always; seeds and datasets when there are several)."""
    if len(cells) == 1:
        config = cells[0].config
        return f"{cells[0].label} on {config.dataset}, seed {config.seed}: accuracy by round (over its clients)"
    seeds = {c.config.seed for c in cells}
    datasets = {c.dataset for c in cells}
    pooled = _lines(cells)
    pooled_seeds = max(len(s) for s, _ in pooled.values())
    pooled_datasets = max(len(d) for _, d in pooled.values())
    over = ["clients"]
    if pooled_seeds > 1:
        over.append(f"{pooled_seeds} seeds")
    if pooled_datasets > 1:
        over.append(f"{pooled_datasets} datasets")
    if len(datasets) == 1:
        where = f" on {next(iter(datasets))}"
    elif pooled_datasets == 1:  # each line on one dataset: name them
        where = f" on {', '.join(sorted(datasets))}" if len(datasets) <= 3 else f" on {len(datasets)} datasets"
    else:
        where = ""
    seed = f", seed {next(iter(seeds))}" if len(seeds) == 1 else ""
    return f"Accuracy by round{where}{seed} (mean over {', '.join(over[:-1]) + ' and ' if len(over) > 1 else ''}{over[-1]})"


def _lines(cells: Sequence[Cell]) -> dict[tuple[str, str], tuple[set, set]]:
    """(label, grid) of each curve -> (its seeds, its datasets). A line is a mean over the seeds
    and datasets of its own label only: runs of different labels on different datasets (a
    folder of single runs) average over neither."""
    pooled: dict[tuple[str, str], tuple[set, set]] = {}
    for c in cells:
        line = pooled.setdefault((c.label, c.grid_text), (set(), set()))
        line[0].add(c.config.seed)
        line[1].add(c.dataset)
    return pooled


def _line_datasets(cells: Sequence[Cell]) -> dict[tuple[str, str], str]:
    """(label, grid) -> " on DATASET" when the runs span several datasets and each line holds
    one of them (a folder of single runs): the title cannot name a line's dataset, its legend
    entry does. Empty when a line is a mean over datasets or there is only one."""
    per_line = {line: datasets for line, (_, datasets) in _lines(cells).items()}
    if len({cell.dataset for cell in cells}) < 2 or any(len(d) > 1 for d in per_line.values()):
        return {}
    return {line: f" on {next(iter(datasets))}" for line, datasets in per_line.items()}


def round_curves(cells: Sequence[Cell], path: Path, colours: dict[str, str] | None = None) -> Path | None:
    """Accuracy by round, one panel per metric: the over-clients value of every evaluated
    round, mean over seeds and datasets, one line per method label (and grid value). The
    title says what it is (a single run: its method, dataset and seed); each panel's y-axis
    spans at least MIN_SPAN points."""
    data, finished = round_values(cells)
    if not finished:
        return None
    where = _line_datasets(finished)
    metrics = list(dict.fromkeys(data["metric"]))
    colours = colours or method_colours(data["label"])
    styles = {grid: style for grid, style in zip(dict.fromkeys(data["grid"]), ["-", "--", ":", "-."] * 10)}
    looks = curve_looks(list(dict.fromkeys(data["label"])))
    plt = _pyplot()
    # At most CURVE_COLUMNS panels a row: nine metrics in one row made a figure 4,869 px wide.
    columns = min(CURVE_COLUMNS, len(metrics))
    rows_of_panels = -(-len(metrics) // columns)
    fig, axes = plt.subplots(rows_of_panels, columns, figsize=(4.5 * columns, 3.8 * rows_of_panels), squeeze=False)
    handles: dict[str, object] = {}  # one legend entry per line, whichever panels it is drawn in
    for ax, metric in zip(axes.flat, metrics):
        part = data[data["metric"] == metric]
        for (label, grid), rows in part.groupby(["label", "grid"], sort=False):
            name = (f"{label} ({grid})" if grid else label) + where.get((label, grid), "")
            (line,) = ax.plot(
                rows["round"],
                rows["value"],
                color=colours.get(label),
                linestyle=styles[grid],
                **looks[label],
                label=name,
            )
            handles.setdefault(name, line)
        ax.set_title(metric)
        ax.set_xlabel("round")
        ax.set_ylabel("accuracy (%)")
        ax.set_ylim(*y_range(part["value"].to_numpy(dtype=float)))
        _round_ticks(ax, sorted(set(part["round"])))
    for ax in list(axes.flat)[len(metrics) :]:
        ax.set_visible(False)
    fig.suptitle(what_is_averaged(finished))
    fig.tight_layout()
    if len(handles) > 1:
        fig.legend(
            list(handles.values()),
            [_wrapped(name) for name in handles],
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=min(4, len(handles)),
            fontsize=8,
            frameon=False,
        )
    atomic_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def round_values(cells: Sequence[Cell]) -> tuple[pd.DataFrame, list[Cell]]:
    """The over-clients accuracy of every evaluated round of the finished `cells`, mean over
    seeds and datasets per (label, grid, metric, round), and the cells it comes from."""
    frames, finished = [], []
    for cell in cells:
        folder = run_dir(cell)
        if not is_complete(folder):
            continue
        m = read_metrics(folder)
        m = m[(m["client"] < 0) & ~m["metric"].isin(NOT_ACCURACY)]
        if not m.empty:
            m = m.assign(label=cell.label, grid=cell.grid_text)
            frames.append(m)
            finished.append(cell)
    if not frames:
        return pd.DataFrame(), []
    data = pd.concat(frames).groupby(["label", "grid", "metric", "round"], as_index=False, sort=False)["value"].mean()
    return data, finished


def _round_ticks(ax, rounds: list[int]) -> None:
    if len(rounds) <= 12:  # the evaluated rounds themselves: no 0.5 ticks around a single round
        ax.set_xticks(rounds)
        if len(rounds) == 1:
            ax.set_xlim(rounds[0] - 1, rounds[0] + 1)
    else:
        from matplotlib.ticker import MaxNLocator  # lazy: matplotlib loads only when a figure is drawn

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
