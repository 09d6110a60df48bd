"""A table says when its runs come from more than one numerics context (torch threads,
device, precision), and which runs; checked on constructed run folders."""

from __future__ import annotations

import json

import yaml
from conftest import tiny_config

from benchmark.sweeps.presets import Cell
from benchmark.sweeps.tables import numerics_context, numerics_note, run_dir


def finished_run(tmp_path, label: str, seed: int, threads: int | None, device="cpu", precision="32-true", **env):
    """A finished run folder as `fedbench run` leaves it, with the context fields given."""
    cell = Cell(label, "dtd", (), tiny_config(tmp_path, tmp_path, method=label, seed=seed))
    folder = run_dir(cell)
    folder.mkdir(parents=True)
    summary = {"metrics": {"HM": 50.0}, "device": device, "precision": precision}
    (folder / "summary.json").write_text(json.dumps(summary))
    environment = {"torch_threads": threads, **env} if threads is not None else dict(env)
    (folder / "environment.json").write_text(json.dumps(environment))
    (folder / "config.yaml").write_text(yaml.safe_dump({"device": "auto", "precision": "auto"}))
    return cell


def test_one_context_is_named_once(tmp_path):
    cells = [finished_run(tmp_path, "promptfl", s, 1, cpu_capability="AVX512") for s in (1, 2)]
    cells.append(finished_run(tmp_path, "fedtpg", 1, 1, cpu_capability="AVX512"))
    note = numerics_note(cells)
    assert note.startswith("Numerics: every run computed under 1 torch threads, cpu (AVX512), 32-true.")
    assert "promptfl" not in note  # no run is singled out
    assert numerics_note([Cell("fedmvp", "dtd", (), tiny_config(tmp_path, tmp_path, method="fedmvp"))]) is None


def test_mixed_thread_counts_devices_and_precisions_are_noted_with_their_runs(tmp_path):
    cells = [finished_run(tmp_path, "promptfl", s, 1) for s in (1, 2, 3)]
    cells.append(finished_run(tmp_path, "fedtpg", 1, 1))
    cells.append(finished_run(tmp_path, "fedtpg", 2, 4))  # another thread count
    cells.append(finished_run(tmp_path, "fedmvp", 1, 1, "cuda:0", "bf16-mixed", device_name="NVIDIA H200"))
    cells.append(Cell("fedmvp", "dtd", (), tiny_config(tmp_path, tmp_path, method="fedmvp", seed=2)))  # not run
    note = numerics_note(cells)
    assert note is not None and "3 numerics contexts" in note
    assert "4 ran under 1 torch threads, cpu, 32-true" in note  # the common context, by count
    assert "4 torch threads, cpu, 32-true: fedtpg on dtd, seed 2" in note
    assert "1 torch threads, NVIDIA H200, bf16-mixed: fedmvp on dtd, seed 1" in note
    assert note.count("fedmvp") == 1  # the unfinished run is not listed


def test_the_context_is_read_from_environment_summary_and_config(tmp_path):
    cell = finished_run(tmp_path, "promptfl", 1, 2, "cuda:1", "16-mixed")
    assert numerics_context(run_dir(cell)) == ("2 torch threads", "cuda", "16-mixed")
    older = finished_run(tmp_path, "fedtpg", 1, None)  # a folder that does not record threads
    summary = json.loads((run_dir(older) / "summary.json").read_text())
    del summary["device"], summary["precision"]
    (run_dir(older) / "summary.json").write_text(json.dumps(summary))
    assert numerics_context(run_dir(older)) == ("? torch threads", "auto", "auto")  # config.yaml's settings


def test_cpu_runs_on_other_kernels_are_noted(tmp_path):
    """AVX2 and AVX-512 kernels sum floats in their own orders: PromptFL's toy run gave
    other digits with ATEN_CPU_CAPABILITY=avx2 (docs/toy-world.md)."""
    cells = [finished_run(tmp_path, "promptfl", s, 1, cpu_capability="AVX512") for s in (1, 2)]
    cells.append(finished_run(tmp_path, "promptfl", 3, 1, cpu_capability="AVX2"))
    assert numerics_context(run_dir(cells[0])) == ("1 torch threads", "cpu (AVX512)", "32-true")
    note = numerics_note(cells)
    assert note is not None and "2 ran under 1 torch threads, cpu (AVX512), 32-true" in note
    assert "1 torch threads, cpu (AVX2), 32-true: promptfl on dtd, seed 3" in note


def test_a_run_records_the_cpu_kernels_torch_chose():
    import torch

    from benchmark.runs.results import environment

    assert environment()["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_a_run_records_the_cpu_model(tmp_path):
    """Two CPUs of the same capability (AVX512) gave other digits: the model is recorded."""
    from benchmark.runs.results import cpu_model, environment

    assert environment()["cpu_model"] == cpu_model()
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9B14\n")
    assert cpu_model(cpuinfo) == "AMD EPYC 9B14"
