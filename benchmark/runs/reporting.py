"""Plain-text renderings of run summaries for the terminal, and where the time of a run's
client-rounds went (`split_time`: `fedbench profile`, `fedbench bench`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def format_summary(summary: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    metrics = summary["metrics"]
    header = " | ".join(f"{m:>7}" for m in metrics)
    values = " | ".join(f"{v:7.2f}" for v in metrics.values())
    title = f"{summary['method']} on {summary['dataset']} ({summary['protocol']}, {summary['shots']}-shot, seed {summary['seed']})"
    return "\n".join(
        [
            title,
            f"| {'method':<10} | {header} |",
            f"| {summary['method']:<10} | {values} |",
            f"trainable {summary['trainable_params']:,} params, uploaded {summary['uploaded_params']:,} per client-round; "
            f"{summary['bytes_up_total']:,} B up, {summary['bytes_down_total']:,} B down in total"
            + (f"; {timing['wall_seconds']:.1f} s" if timing else ""),
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
