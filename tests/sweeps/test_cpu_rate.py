"""The dry run's cost line gives CPU time beside the GPU-hours, from the toy demo's measured
rate (issue 60, item 10: cost was estimated only in GPU-hours)."""

from __future__ import annotations

from benchmark.sweeps.cost import PresetCost
from benchmark.sweeps.cpu_rate import TOY_TIMINGS, measured_cpu_rate


def test_the_shipped_timings_record_a_cpu_rate():
    rate = measured_cpu_rate()
    assert rate is not None and rate.cores == 2 and rate.source == TOY_TIMINGS
    assert "results/toy/timings.md" in rate.says()


def test_the_cost_line_gives_core_hours_at_the_recorded_rate(tmp_path):
    timings = tmp_path / "timings.md"
    timings.write_text(
        'prose\n<!-- fedbench-cpu-rate {"gflops_per_core": 10, "cores": 4, "cpu": "X", "date": "D"} -->\n'
    )
    cost = PresetCost(flops=10e9 * 3600 * 8, cells=3)  # 8 core-hours at 10 GFLOP/s per core
    assert cost.cpu_text(timings) == (
        f"; on CPU about 8.0 core-hours (2h00m on 4 cores) at the toy demo's measured 10 GFLOP/s per core "
        f"(X, D, {timings})"
    )
    assert "on CPU about" in cost.line(rate_tflops=100.0)  # the shipped rate, beside the GPU-hours
    timings.write_text("no rate recorded\n")
    assert cost.cpu_text(timings) == ""
