"""Peak memory per phase (benchmark/memory.py): the CPU's resident set measured here; the CUDA
peaks through torch.cuda's counters, mocked (no GPU on the test machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from benchmark import memory
from benchmark.memory import PeakMemory

ROOT = Path(__file__).resolve().parents[2]


PHASES = """
import json, torch
from benchmark.memory import PeakMemory
meter = PeakMemory()
with meter.phase("training"):
    block = torch.ones(64 * 2**20, dtype=torch.float32)  # 256 MiB, written: resident
    del block
with meter.phase("evaluation"):
    small = torch.ones(2**20)
    del small
print(json.dumps(meter.report()))
"""


def test_a_phase_records_its_own_cpu_peak():
    # In a process of its own: after a thousand tests this one's heap may serve the block
    # from pages already resident, and its peak would not be the phase's.
    done = subprocess.run([sys.executable, "-c", PHASES], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {"training", "evaluation", "cpu_rss_scope"}
    if sys.platform == "linux":  # the peak is reset per phase (/proc/self/clear_refs)
        assert report["cpu_rss_scope"] == "phase"
        assert report["training"]["cpu_rss_peak_mb"] - report["evaluation"]["cpu_rss_peak_mb"] > 200
    assert report["training"]["cpu_rss_peak_mb"] >= 256


def test_cuda_peaks_are_read_per_phase_with_nesting(monkeypatch):
    """Torch's CUDA counters replaced by a fake device whose peak follows `allocate`."""

    class FakeCuda:
        def __init__(self):
            self.now, self.peak, self.resets = 0, 0, 0

        def allocate(self, mib):
            self.now += mib * memory.MiB
            self.peak = max(self.peak, self.now)

        def free(self, mib):
            self.now -= mib * memory.MiB

        def reset_peak_memory_stats(self):
            self.peak, self.resets = self.now, self.resets + 1

    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", fake.reset_peak_memory_stats)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: fake.peak)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: fake.peak + 2 * memory.MiB)
    meter = PeakMemory(cuda=True)
    with meter.phase("training"):
        fake.allocate(100)
        fake.free(100)
        with meter.phase("evaluation"):  # between rounds: its own peak, the training's kept
            fake.allocate(30)
            fake.free(30)
        fake.allocate(10)
        fake.free(10)
    report = meter.report()
    assert report["training"]["cuda_allocated_peak_mb"] == 100.0
    assert report["training"]["cuda_reserved_peak_mb"] == 102.0
    assert report["evaluation"]["cuda_allocated_peak_mb"] == 30.0
    assert fake.resets == 3  # entering training, entering evaluation, training resumed


def test_a_run_records_its_peaks_and_the_listing_shows_them(fedbench, fake_data_root, tmp_path):
    import json

    from conftest import run_tiny_cell

    run_tiny_cell(fedbench, "promptfl", fake_data_root, tmp_path / "runs")
    timing = json.loads(next((tmp_path / "runs").rglob("timing.json")).read_text())
    assert {"training", "evaluation"} <= set(timing["memory"])
    assert timing["memory"]["training"]["cpu_rss_peak_mb"] > 0
    assert "cuda_allocated_peak_mb" not in timing["memory"]["training"]  # a CPU run
    done = fedbench("runs", tmp_path / "runs", "--memory")
    assert done.returncode == 0 and "training RSS MiB" in done.stdout and "evaluation RSS MiB" in done.stdout


def test_bench_measures_each_phase_of_a_method_in_a_process_of_its_own():
    from benchmark.sweeps.memory_use import format_memory, method_memory

    (report,) = method_memory([("promptfl", {})], "fedbench-tiny-vit", batch_size=4, classes=3)
    assert set(report.peaks) == set(report.above_start) == {"training", "evaluation"}
    assert all(p["cpu_rss_peak_mb"] > 0 for p in report.peaks.values())
    assert all(v >= 0 for v in report.above_start.values())
    lines = format_memory([report]).splitlines()
    assert lines[0] == "| method | phase | peak RSS | above start |" and lines[2].startswith("| promptfl | training |")
