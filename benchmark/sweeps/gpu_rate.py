"""The training rate a GPU sustained on the Table 1 methods, as `scripts/gpu_check.sh` measured
it and wrote it into `results/gpu.md`; the dry run's GPU-hour line uses it when the file
exists (and names it), else an assumed round number (`benchmark.sweeps.cost`).

The report carries the rate in one machine-readable comment line, so its prose can change
freely: `<!-- fedbench-gpu-rate {"tflops": 5.1, "gpu": "NVIDIA H200", "date": "2026-12-05"} -->`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_REPORT = ROOT / "results" / "gpu.md"
_MARK = re.compile(r"<!-- fedbench-gpu-rate (\{.*?\}) -->")


@dataclass(frozen=True)
class MeasuredRate:
    tflops: float  # training FLOPs / whole client-round seconds, all timed methods and shapes together
    gpu: str
    date: str
    source: Path

    def says(self) -> str:
        """How a line names the rate, e.g. 'the measured 5.1 TFLOP/s (NVIDIA H200, 2026-12-05, results/gpu.md)'."""
        where = self.source.relative_to(ROOT) if self.source.is_relative_to(ROOT) else self.source
        return f"the measured {self.tflops:g} TFLOP/s ({self.gpu}, {self.date}, {where.as_posix()})"


def rate_comment(tflops: float, gpu: str, date: str) -> str:
    """The line `measured_rate` reads back."""
    return f"<!-- fedbench-gpu-rate {json.dumps({'tflops': float(f'{tflops:.3g}'), 'gpu': gpu, 'date': date})} -->"


def measured_rate(path: Path = GPU_REPORT) -> MeasuredRate | None:
    """The rate recorded in `path`; None when there is no report (or it records no rate:
    a report written where nothing trained)."""
    try:
        text = path.read_text()
    except OSError:
        return None
    found = _MARK.search(text)
    if found is None:
        return None
    try:
        fields = json.loads(found.group(1))
        rate = float(fields["tflops"])
    except (ValueError, KeyError, TypeError):
        return None
    if not rate > 0:
        return None
    return MeasuredRate(rate, str(fields.get("gpu", "?")), str(fields.get("date", "?")), path)
