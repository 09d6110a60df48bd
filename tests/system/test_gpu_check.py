"""scripts/gpu_check.py, the part a CPU can check: it times real runs (the tiny CLIP on a
generated DTD layout, on the CPU), writes a report whose rate the dry run reads back, and the
noise that moves clients apart lands on each parameter's device (its crash on CUDA, issue 48)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from benchmark.sweeps.gpu_rate import measured_rate

ROOT = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_report_of_a_cpu_run_names_every_figure_and_its_rate_reads_back(tmp_path):
    gpu_check = load_script()
    out = tmp_path / "gpu.md"
    code = gpu_check.main(
        [
            "--device",
            "cpu",
            "--backbone",
            "fedbench-tiny-vit",
            "--shapes",
            "4",
            "--methods",
            "zeroshot,promptfl",
            "--clients",
            "2",
            "--no-batched",
            "--no-compiled",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = out.read_text()
    assert "Compiled blocks" not in text
    assert "fedbench-tiny-vit with random weights on cpu" in text and "torch " in text
    rows = [line for line in text.splitlines() if line.startswith("| promptfl | 4 |")]
    assert len(rows) == 1 and " ms | " in rows[0] and "32-true" in rows[0]  # timed, in the CPU's precision
    assert "| zeroshot | 4 | – | 32-true | trains nothing |" in text
    rate = measured_rate(out)
    assert rate is not None and rate.tflops > 0 and rate.gpu.startswith("CPU")
    assert f"{rate.tflops:g} TFLOP/s" in rate.says() and "Table 1's estimated" in text


def test_the_images_per_client_of_the_three_shapes_are_table_1s_range():
    gpu_check = load_script()
    assert [gpu_check.images_per_client(c) for c in gpu_check.SHAPES] == [38.4, 80.0, 318.4]


def test_client_noise_is_drawn_on_the_cpu_and_lands_on_the_parameters_device_and_dtype():
    from benchmark.sweeps.timings import spread_apart

    cpu = torch.nn.Linear(3, 2)
    half = torch.nn.Linear(3, 2).to(torch.float64)
    half.load_state_dict({k: v.double() for k, v in cpu.state_dict().items()})
    before = cpu.weight.detach().clone()
    spread_apart(cpu, seed=7)
    spread_apart(half, seed=7)
    assert not torch.equal(cpu.weight, before)
    torch.testing.assert_close(half.weight.float(), cpu.weight)  # the same noise, whatever the parameter's kind


@pytest.mark.gpu
def test_client_noise_on_cuda_parameters():
    """What crashed scripts/gpu_check.sh: CPU noise added to CUDA parameters."""
    from benchmark.sweeps.timings import spread_apart

    cpu = torch.nn.Linear(3, 2)
    cuda = torch.nn.Linear(3, 2).cuda()
    cuda.load_state_dict(cpu.state_dict())
    spread_apart(cpu, seed=3)
    spread_apart(cuda, seed=3)
    torch.testing.assert_close(cuda.weight.cpu(), cpu.weight)


def test_the_report_compares_compiled_blocks_with_eager(tmp_path, monkeypatch):
    from benchmark import compiled

    monkeypatch.setattr(compiled, "BACKEND", "eager")  # the same tracing without inductor's minutes on 2 cores
    gpu_check = load_script()
    out = tmp_path / "gpu.md"
    args = ["--device", "cpu", "--backbone", "fedbench-tiny-vit", "--shapes", "4", "--methods", "promptfl"]
    assert gpu_check.main([*args, "--clients", "2", "--no-batched", "--out", str(out)]) == 0
    text = out.read_text()
    assert "## Eager (the default path), compiled blocks (`--compile-blocks true`) and batched clients" in text
    section = text.split("## Eager (the default path)")[1].split("\n## ")[0]
    (row,) = [line for line in section.splitlines() if line.startswith("| promptfl | ")]
    eager = next(line for line in text.splitlines() if line.startswith("| promptfl | 4 |"))
    assert row.split(" | ")[1] == eager.split(" | ")[4]  # the eager figure is the table's own
    assert row.split(" | ")[4].endswith(" ms")  # PromptFL's clients batched, timed beside them
    hours = text.split("## Table 1 per method")[1].split("\n## ")[0]
    assert any(line.startswith("| promptfl | 32-true |") for line in hours.splitlines())
    assert len(compiled._COMPILED) > 0  # noqa: SLF001  (the compiled run compiled its blocks)
