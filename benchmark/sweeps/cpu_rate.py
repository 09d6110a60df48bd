"""The rate a CPU sustained on the toy demo, for the dry run's CPU-time line: counted FLOPs
(`benchmark.sweeps.cost`) per core-second of `make demo`, the dated measurement that
`results/toy/timings.md` records in one machine-readable comment line:
`<!-- fedbench-cpu-rate {"gflops_per_core": 13.8, "cores": 2, "cpu": "AMD EPYC", ...} -->`.

The toy CLIP's small matrices run further from a CPU's peak than a ViT-B/16's, and the demo
includes each cell's setup and evaluation, so the figure it gives a large backbone is an
order of magnitude, not a plan.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOY_TIMINGS = ROOT / "results" / "toy" / "timings.md"
_MARK = re.compile(r"<!-- fedbench-cpu-rate (\{.*?\}) -->")


@dataclass(frozen=True)
class CpuRate:
    gflops_per_core: float  # counted FLOPs / (wall seconds x cores) of the measured demo
    cores: int
    cpu: str
    date: str
    source: Path

    def hours(self, flops: float) -> float:
        """Core-hours of `flops` at this rate."""
        return flops / (self.gflops_per_core * 1e9) / 3600

    def says(self) -> str:
        where = self.source.relative_to(ROOT) if self.source.is_relative_to(ROOT) else self.source
        return (
            f"the toy demo's measured {self.gflops_per_core:g} GFLOP/s per core ({self.cpu}, {self.date}, "
            f"{where.as_posix()})"
        )


def measured_cpu_rate(path: Path = TOY_TIMINGS) -> CpuRate | None:
    """The rate recorded in `path`; None when the file or its line is absent or unreadable."""
    try:
        found = _MARK.search(path.read_text())
        fields = json.loads(found.group(1)) if found else None
        rate = float(fields["gflops_per_core"]) if fields else 0.0
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not rate > 0:
        return None
    return CpuRate(rate, int(fields.get("cores", 1)), str(fields.get("cpu", "?")), str(fields.get("date", "?")), path)
