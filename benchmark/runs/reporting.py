"""Plain-text renderings of run summaries for the terminal."""

from __future__ import annotations

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
