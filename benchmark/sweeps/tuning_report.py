"""tuning.md and tuning.png: what `fedbench tune` found, one curve per method.

A reader checks a tuned row here before trusting it: the validation score of every point the
search tried (mean and spread over the tuning seeds), the smoothed curve the choice was read
from, the chosen point, the measured noise, and the flags (a choice at an end of the values tried
or next to a jump beyond the noise), which the table repeats.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import stdev
from typing import Any

from benchmark.files import atomic_figure, atomic_write
from benchmark.method import Choice, LogUniform
from benchmark.sweeps import search
from benchmark.sweeps.tuning_plan import TuningPlan

# The searches are `benchmark.sweeps.tuning_studies`'s MethodSearch, named here, not imported:
# tuning_studies imports this module, and a type hint closing that cycle would tie them together.
MethodSearch = Any


def write_report(plan: TuningPlan, searches: dict[str, MethodSearch], md_path: Path, png_path: Path) -> None:
    atomic_write(md_path, report_markdown(plan, searches))
    if searches:
        plot_curves(plan, searches, png_path)


def _axis_name(plan: TuningPlan, label: str) -> str | None:
    """The one numeric hyperparameter a method's curve is drawn over (None: not one)."""
    variant = next(v for v in plan.table_variants if v.label == label)
    numeric = [n for n, s in sorted(plan.space(variant).items()) if not isinstance(s, Choice)]
    return numeric[0] if len(numeric) == 1 else None


def _spread(point: search.Trial) -> float:
    return stdev(point.per_seed) if point.per_seed is not None and len(point.per_seed) > 1 else float("nan")


def report_markdown(plan: TuningPlan, searches: dict[str, MethodSearch]) -> str:
    metric = plan.headline
    lines = [
        f"# Tuning of `{plan.preset.name}`",
        "",
        f"Written by `{plan.command or 'fedbench tune'}`; the figure is `tuning.png` beside this file, every trial "
        "with its per-seed values is in `tuning.csv`.",
        "",
        f"- Budget, the same for every method: {plan.budget_text}.",
        f"- Choice: {search.CHOICE_RULE}.",
        "- Flag (¶ in the table): the choice is at an end of the values tried, at or past its declared range "
        "(the extensions spent); or next to a jump: within one grid "
        "step of it the curve steps by more than the noise and far more steeply than its typical step, or the "
        "choice's own nearest tried neighbour scores apart from it by more than the two points' spreads over "
        "seeds explain (2 x the standard error of their difference).",
        "- Scored on the validation split; the test split was never read.",
        "",
        f"| method | chosen | validation {metric} | best point | paper default | noise (SE) | trials | flag |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_summary_row(label, found) for label, found in searches.items()]
    for label, found in searches.items():
        lines += _method_section(plan, label, found)
    return "\n".join(lines) + "\n"


def _summary_row(label: str, found: MethodSearch) -> str:
    """A method's row of the summary table: its choice, the scores around it, the noise, the budget spent."""
    chosen = found.chosen
    if chosen is None:
        return f"| {label} | – | – | – | – | – | {len(found.trials)}/{found.budget} | no trial finished |"
    values = [t.value for t in found.points if t.per_seed is not None]
    paper = found.points[0].value if found.points and found.points[0].per_seed is not None else None
    se = found.selection.noise
    return (
        f"| {label} | {', '.join(f'{k}={search.format_value(v)}' for k, v in sorted(chosen.params.items()))} "
        f"| {chosen.value:.2f} | {max(values):.2f} | {'failed' if paper is None else f'{paper:.2f}'} "
        f"| {'–' if not math.isfinite(se) else f'{se:.2f}'} | {len(found.trials)}/{found.budget}"
        f"{'' if found.done else ' (running)'} | {'¶ ' + '; '.join(found.selection.flags) if found.selection.flags else ''} |"
    )


def _method_section(plan: TuningPlan, label: str, found: MethodSearch) -> list[str]:
    """A method's section: the noise its points are read against, and every trial with its
    per-seed values and smoothed score, the choice marked."""
    metric = plan.headline
    lines = ["", f"## {label}", ""]
    if found.selection is None:
        lines.append("No trial finished.")
        return lines
    se = found.selection.noise
    if math.isfinite(se):
        lines.append(
            f"Noise: one point's {metric} has a standard error of {se:.2f} (median std over "
            f"{len(plan.seeds)} seeds / sqrt({len(plan.seeds)})); a gap above {search.jump_limit(se):.2f} is "
            "beyond it."
        )
    else:
        lines.append("Noise: not measurable (fewer than two seeds).")
    lines += ["", f"| trial | phase | hyperparameters | {metric} | std over seeds | per seed | smoothed | |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    order = sorted(
        range(len(found.trials)),
        key=lambda i: (
            [str(v) for _, v in sorted(found.trials[i].params.items())]
            if not _axis_name(plan, label)
            else found.trials[i].params[_axis_name(plan, label)]
        ),
    )
    for i in order:
        t, point = found.trials[i], found.points[i]
        shown = ", ".join(f"{k}={search.format_value(v)}" for k, v in sorted(t.params.items()))
        if point.per_seed is None:
            cells = ["failed", "", "", ""]
        else:
            spread = _spread(point)
            cells = [
                f"{point.value:.2f}",
                "–" if not math.isfinite(spread) else f"{spread:.2f}",
                " / ".join(f"{v:.2f}" for v in point.per_seed),
                f"{found.selection.smoothed[i]:.2f}",
            ]
        mark = "**chosen**" if i == found.selection.index else ""
        lines.append(
            f"| {t.number} | {t.user_attrs.get('phase', '')} | {shown} | " + " | ".join(cells) + f" | {mark} |"
        )
    if found.selection.flags:
        lines += ["", *(f"¶ {flag}." for flag in found.selection.flags)]
    return lines


def plot_curves(plan: TuningPlan, searches: dict[str, MethodSearch], path: Path) -> None:
    """One panel per method: validation score (mean, and std over seeds as bars) against the
    tuned value, grid points, refinements and extensions apart, the smoothed curve, the choice starred."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(searches)
    cols = min(4, len(labels))
    rows = math.ceil(len(labels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, label in zip(axes.flat, labels):
        _curve_panel(ax, plan, label, searches[label])
    for ax in list(axes.flat)[len(labels) :]:
        ax.axis("off")
    handles = {}
    for ax in axes.flat:  # every kind of mark once, from whichever panel has it
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    if handles:
        fig.legend(
            list(handles.values()), list(handles), loc="lower center", ncol=len(handles), fontsize=8, frameon=False
        )
    fig.suptitle(
        f"fedbench tune {plan.preset.name}: validation {plan.headline} per trial (mean ± std over seeds)", fontsize=11
    )
    fig.tight_layout(rect=(0, 0.05, 1, 0.96))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_figure(fig, path, dpi=110, metadata={"Software": None})
    plt.close(fig)


def _curve_panel(ax, plan: TuningPlan, label: str, found: MethodSearch) -> None:
    """A method's panel of `plot_curves`."""
    name = _axis_name(plan, label)
    ax.set_title(label, fontsize=10)
    if found.selection is None:
        ax.text(0.5, 0.5, "no trial finished", ha="center", va="center", transform=ax.transAxes)
        return
    xs = [t.params[name] if name else t.number for t in found.trials]
    for phase, marker in (("grid", "o"), ("refinement", "s"), ("extension", "^")):
        index = [
            i
            for i, t in enumerate(found.trials)
            if t.user_attrs.get("phase", "grid") == phase and found.points[i].per_seed is not None
        ]
        if index:
            ax.errorbar(
                [xs[i] for i in index],
                [found.points[i].value for i in index],
                yerr=[0 if not math.isfinite(s := _spread(found.points[i])) else s for i in index],
                fmt=marker,
                ms=4,
                capsize=2,
                label=phase,
            )
    failed = [i for i, p in enumerate(found.points) if p.per_seed is None]
    if failed:
        ax.plot([xs[i] for i in failed], [0.0] * len(failed), "x", color="red", label="failed")
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ax.plot(
        [xs[i] for i in order],
        [found.selection.smoothed[i] for i in order],
        "-",
        color="grey",
        lw=1,
        label="smoothed",
    )
    best = found.selection.index
    ax.plot([xs[best]], [found.points[best].value], "*", color="black", ms=12, label="chosen")
    if name:
        ax.set_xscale("log" if _is_log(plan, label, name) else "linear")
        ax.set_xlabel(name, fontsize=9)
    else:
        ax.set_xlabel("trial", fontsize=9)
    ax.set_ylabel(f"validation {plan.headline}", fontsize=9)
    if found.selection.flags:
        ax.set_title(f"{label} ¶", fontsize=10, color="darkred")
    ax.tick_params(labelsize=8)


def _is_log(plan: TuningPlan, label: str, name: str) -> bool:
    variant = next(v for v in plan.table_variants if v.label == label)
    return isinstance(plan.space(variant)[name], LogUniform)
