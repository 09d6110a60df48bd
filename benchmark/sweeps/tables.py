"""Tables are pandas views over run folders: long rows in, pivots out.

This module reads the run folders: `collect` reads every finished cell into long rows (one
per run x metric), and the notes that need the folders themselves (the numerics context,
the failed cells, the spread over clients) come from here. The rest works on those rows:
`benchmark.sweeps.table_stats` gives mean and std over seeds with the marks a reader should
not miss, `benchmark.sweeps.table_comparisons` the paired differences, rankings and paper
comparison, `benchmark.sweeps.table_render` writes Markdown, CSV and LaTeX.
A cell with no finished run is simply absent: `fedbench reproduce` fills it. A cell whose
last run failed (diverged, crashed) is shown as "failed" -- never as a number, and never as
the mean of the seeds that happened to work -- until a rerun succeeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd
import yaml

from benchmark.protocol_registry import get_protocol
from benchmark.runs.identity import run_name
from benchmark.runs.results import is_complete, read_failure, read_summary, run_health
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.table_stats import KEYS


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
