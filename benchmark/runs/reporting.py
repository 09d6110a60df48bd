"""Plain-text renderings of run summaries for the terminal, and where the time of a run's
client-rounds went (`split_time`: `fedbench profile`, `fedbench bench`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmark.federation.servers import DEFAULT_FEDERATION, federation_label


def run_label(
    method: str, federation: str = DEFAULT_FEDERATION, finetune_epochs: int = 0, evaluated: bool = False
) -> str:
    """What kind of run it was, as a table labels its row: `promptfl`, `promptfl (local)`,
    `promptfl (FT 1)`, `promptfl (evaluated)` (the row axes of benchmark.sweeps.presets)."""
    kind = [label] if federation and (label := federation_label(federation)) else []
    kind += [f"FT {finetune_epochs}"] if finetune_epochs else []
    kind += ["evaluated"] if evaluated else []
    return f"{method} ({', '.join(kind)})" if kind else method


def config_label(config) -> str:
    """`run_label` of a RunConfig."""
    return run_label(config.method, config.federation, config.finetune_epochs, bool(config.evaluate_from))


def format_summary(summary: dict[str, Any], timing: dict[str, Any] | None = None, label: str | None = None) -> str:
    """The table a run prints; `label` names its row (`config_label`; default: the method)."""
    metrics = summary["metrics"]
    label = label or summary["method"]
    width = max(len("method"), len(label))  # a long plugin name or label keeps the columns aligned
    header = " | ".join(f"{m:>7}" for m in metrics)
    values = " | ".join(f"{v:7.2f}" for v in metrics.values())
    title = f"{label} on {summary['dataset']} ({summary['protocol']}, {summary['shots']}-shot, seed {summary['seed']})"
    if summary.get("evaluated_from"):  # nothing trained, nothing travelled: say what it scored instead
        cost = f"the saved clients of {summary['evaluated_from']} scored again; nothing trained or uploaded"
    else:
        cost = (
            f"trainable {summary['trainable_params']:,} params, uploaded {summary['uploaded_params']:,} per "
            f"client-round; {summary['bytes_up_total']:,} B up, {summary['bytes_down_total']:,} B down in total"
        )
    return "\n".join(
        [
            title,
            f"| {'method':<{width}} | {header} |",
            f"| {label:<{width}} | {values} |",
            cost + (f"; {timing['wall_seconds']:.1f} s" if timing else ""),
        ]
    )


@dataclass
class TimeSplit:
    """Seconds of a run's client-rounds by where they went (summed over the rounds)."""

    client_rounds: int
    total: float
    model: float  # the steps: forward, backward, optimizer step
    data: float  # fetching, decoding, augmenting, collating batches
    optimizer: float  # the method's configure_optimizers
    framework: float  # everything else: seeding, state swaps, the loop, upload and aggregation


def split_time(rounds) -> TimeSplit:
    """The client-round time of `rounds` (a run's RoundLogs) split into model, data, optimizer
    setup and the framework's rest."""
    total = sum(r.total_seconds for r in rounds)
    model = sum(r.model_seconds for r in rounds)
    data = sum(r.data_seconds for r in rounds)
    optimizer = sum(r.optimizer_seconds for r in rounds)
    return TimeSplit(
        sum(len(r.clients) for r in rounds), total, model, data, optimizer, total - model - data - optimizer
    )
