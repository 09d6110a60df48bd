"""Peak memory per phase of a run (training, evaluation): the process's resident set (CPU
RSS) and, on CUDA, the peak memory torch allocated and reserved.

A phase's peak is the highest value reached while it ran, over all the times it ran (the
evaluations between rounds are one phase): entering a phase resets the peaks and leaving
it reads them. Phases nest (an evaluation inside the training's rounds): the outer phase
is read before the inner one resets the peaks and reset again when it resumes, so each
phase counts only its own time.

The CPU peak is Linux's VmHWM (/proc/self/status), reset by writing 5 to
/proc/self/clear_refs; where that is not possible the peak is the process's since it
started (`resource.getrusage`), and `cpu_rss_scope` says so. The CUDA peaks are torch's
`max_memory_allocated` / `max_memory_reserved`, reset by `reset_peak_memory_stats`.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from pathlib import Path
from typing import Any

import torch

MiB = 2**20
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> int | None:
    """A memory line of /proc/self/status ("VmHWM", "VmRSS"), in bytes; None without /proc."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def rss_bytes() -> int:
    """The process's resident set now (Linux; 0 where /proc is missing)."""
    return _status_bytes("VmRSS") or 0


def rss_peak_bytes() -> int:
    """The process's peak resident set since the last reset (Linux) or since it started."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def reset_rss_peak() -> bool:
    """Reset the peak resident set to the current one; False where the system cannot."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


class PeakMemory:
    """Peaks per phase, in MiB: `with meter.phase("training"): ...`; `report()` for timing.json.
    `cuda`: whether to read torch's CUDA peaks (the run's device is a GPU)."""

    def __init__(self, cuda: bool = False) -> None:
        self.cuda = cuda
        self.peaks: dict[str, dict[str, float]] = {}
        self.resettable = True
        self._stack: list[str] = []

    def _reset(self) -> None:
        self.resettable = reset_rss_peak() and self.resettable
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def _read(self, name: str) -> None:
        now = {"cpu_rss_peak_mb": rss_peak_bytes() / MiB}
        if self.cuda:
            now["cuda_allocated_peak_mb"] = torch.cuda.max_memory_allocated() / MiB
            now["cuda_reserved_peak_mb"] = torch.cuda.max_memory_reserved() / MiB
        seen = self.peaks.setdefault(name, {})
        for key, value in now.items():
            seen[key] = round(max(seen.get(key, 0.0), value), 1)

    @contextlib.contextmanager
    def phase(self, name: str):
        if self._stack:  # the outer phase's peak so far is its own
            self._read(self._stack[-1])
        self._stack.append(name)
        self._reset()
        try:
            yield
        finally:
            self._read(name)
            self._stack.pop()
            if self._stack:
                self._reset()

    def report(self) -> dict[str, Any]:
        """{phase: {cpu_rss_peak_mb, [cuda_allocated_peak_mb, cuda_reserved_peak_mb]}, cpu_rss_scope}."""
        scope = "phase" if self.resettable else "process (this system cannot reset the peak: since the process started)"
        return {**self.peaks, "cpu_rss_scope": scope} if self.peaks else {}
