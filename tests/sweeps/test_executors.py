"""`fedbench reproduce --executor local|ray|slurm`: the same table whichever engine runs the
cells (local worker processes; a real local Ray instance; submitit's local executor standing
in for Slurm), the sbatch script the Slurm executor submits, requeue after preemption, a
stopped or dying worker, and clean errors."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from signal_guard import signal_self

from benchmark.cli import main

TOY_SWEEP = (
    "title: Toy sweep\n"
    "run: {dataset: toy, protocol: base2novel, shots: 4, rounds: 2, local_epochs: 1, clients: 4, batch_size: 8,"
    " backbone: fedbench-toy-vit, pretrained: fedbench-toy-test, wandb: disabled}\n"
    "datasets: [toy]\n"
    "methods: [zeroshot, promptfl]\n"
    "seeds: [1, 2]\n"
)


def write_sweep(folder: Path, text: str = TOY_SWEEP) -> Path:
    preset = folder / "toysweep.yaml"
    preset.write_text(text)
    return preset


def reproduce(folder: Path, preset: Path, *extra: str) -> int:
    return main(["reproduce", str(preset), "--out", str(folder / "runs"), "--results", str(folder / "results"), *extra])


def reproduce_signalled(
    folder: Path, preset: Path, ready: Callable[[], bool], send: Callable[[], None], *extra: str
) -> int:
    """`reproduce` while a thread waits (at most 240 s) until ready() and then calls send()."""
    import threading

    def wait_then_send() -> None:
        deadline = time.time() + 240
        while time.time() < deadline and not ready():
            time.sleep(0.05)
        send()

    thread = threading.Thread(target=wait_then_send)
    thread.start()
    try:
        return reproduce(folder, preset, *extra)
    finally:
        thread.join()


def run_files(folder: Path) -> dict[str, tuple[str, str]]:
    """Each run folder's metrics.csv and summary.json: every number a cell wrote."""
    return {
        p.name: ((p / "metrics.csv").read_text(), (p / "summary.json").read_text())
        for p in sorted((folder / "runs").glob("*_seed*"))
        if p.is_dir()
    }


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory, toy_test_checkpoint):
    """The toy sweep (2 methods x 2 seeds) run by the default executor: the reference."""
    folder = tmp_path_factory.mktemp("local")
    assert reproduce(folder, write_sweep(folder)) == 0
    assert len(run_files(folder)) == 4
    return folder


def test_local_workers_render_the_local_table(local_sweep, tmp_path, capsys, monkeypatch):
    import torch

    import benchmark.sweeps.executors.local as local

    # As on a machine with two GPUs (the cells' device is auto, which is the CPU here): each
    # worker is given one of them.
    monkeypatch.setattr(local, "gpu_count", lambda: 2)
    threads = torch.get_num_threads()  # the reference's, so that every bit can be compared
    # With data-loader workers of their own (which a daemon process could not start):
    assert (
        reproduce(
            tmp_path, write_sweep(tmp_path), "--workers", "2", "--cpus-per-cell", str(threads), "--set", "num_workers=1"
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ran 4 runs, 0 were already done" in out
    assert (tmp_path / "results" / "table.csv").read_bytes() == (local_sweep / "results" / "table.csv").read_bytes()
    assert run_files(tmp_path) == run_files(local_sweep)  # every loss and accuracy, not only the table
    given = set()
    for run in (tmp_path / "runs").glob("*_seed*"):
        environment = json.loads((run / "environment.json").read_text())
        assert environment["torch_threads"] == threads
        given.add(environment["cuda_visible_devices"])
    assert given == {"0", "1"}  # two workers, one GPU each


def test_local_workers_spread_over_the_gpus():
    from benchmark.sweeps.executors.local import least_used_gpu

    taken: list = []
    for _ in range(6):
        taken.append(least_used_gpu(4, taken))
    assert taken == ["0", "1", "2", "3", "0", "1"]
    assert least_used_gpu(2, ["0", "0", "1"]) == "1" and least_used_gpu(0, []) is None


def test_gpus_per_cell_shares_a_gpu_among_ray_tasks(tmp_path, capsys):
    from types import SimpleNamespace

    from benchmark.sweeps.executors.ray import RayExecutor

    def job(device: str) -> SimpleNamespace:  # what `resources` reads of a CellJob
        return SimpleNamespace(cell=SimpleNamespace(config=SimpleNamespace(device=device)), threads=2)

    assert RayExecutor(gpus_per_cell=0.25).resources(job("auto"), gpus=1, node_cpus=4) == {
        "num_gpus": 0.25,
        "num_cpus": 1,
    }
    assert RayExecutor().resources(job("auto"), gpus=1, node_cpus=4)["num_gpus"] == 1.0
    assert RayExecutor(gpus_per_cell=0.25).resources(job("cpu"), gpus=1, node_cpus=4) == {"num_cpus": 2}
    for bad in ("0", "1.5", "many"):
        with pytest.raises(SystemExit) as stop:
            reproduce(tmp_path, write_sweep(tmp_path), "--executor", "ray", "--gpus-per-cell", bad)
        assert stop.value.code == 2 and "expected a fraction of a GPU in (0, 1]" in capsys.readouterr().err


def test_local_workers_divide_this_process_threads_unless_told():
    import argparse

    import torch

    from benchmark.cli.commands.reproduce import cell_threads

    assert cell_threads(argparse.Namespace(workers=3, cpus_per_cell=None)) == max(1, torch.get_num_threads() // 3)
    assert cell_threads(argparse.Namespace(workers=3, cpus_per_cell=2)) == 2
    assert cell_threads(argparse.Namespace(workers=None, cpus_per_cell=None)) is None  # this process's own


@pytest.mark.slow
def test_ray_executor_renders_the_local_table(local_sweep, tmp_path, monkeypatch, capsys):
    import ray

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False)  # two CPU workers on this machine
    try:
        assert reproduce(tmp_path, write_sweep(tmp_path), "--executor", "ray") == 0
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert "ran 4 runs, 0 were already done" in out
    assert (tmp_path / "results" / "table.csv").read_bytes() == (local_sweep / "results" / "table.csv").read_bytes()
    assert run_files(tmp_path) == run_files(local_sweep)  # every loss and accuracy, not only the table


DIES_ONCE = """
import os
from pathlib import Path

from benchmark.registry import register_method
from methods.promptfl import PromptFL

MARK = Path({mark!r})


@register_method("test_dies_once")
class DiesOnce(PromptFL):
    \"\"\"Test-only: PromptFL whose process dies in round 3 the first time (as a lost node), then trains on.\"\"\"

    def training_step(self, batch, batch_idx):
        if self.client.round == 3 and not MARK.exists():
            MARK.touch()
            os._exit(9)
        return super().training_step(batch, batch_idx)
"""


@pytest.mark.slow
def test_a_ray_task_whose_worker_dies_is_retried_and_resumes_from_its_round_checkpoint(
    tmp_path, monkeypatch, capsys, toy_test_checkpoint
):
    """docs/scaling-out.md: a task whose worker dies is retried by Ray and resumes from the
    cell's round checkpoint, to the numbers of a run that never died."""
    import ray

    mark = tmp_path / "died"
    plugin = tmp_path / "dies_once.py"
    plugin.write_text(DIES_ONCE.format(mark=str(mark)))
    sweep = TOY_SWEEP.replace("rounds: 2", "rounds: 4, checkpoint_every: 1").replace("seeds: [1, 2]", "seeds: [1]")
    flags = ("--methods", str(plugin), "--cpus-per-cell", "1")
    reference = tmp_path / "reference"
    reference.mkdir()
    mark.touch()  # the reference never dies
    assert reproduce(reference, write_sweep(reference, sweep), *flags) == 0
    mark.unlink()

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    retried = tmp_path / "retried"
    retried.mkdir()
    ray.init(num_cpus=1, include_dashboard=False)
    try:
        assert reproduce(retried, write_sweep(retried, sweep), "--executor", "ray", *flags) == 0
    finally:
        ray.shutdown()
    out = capsys.readouterr().out
    assert mark.exists(), "the task's worker must have died for this test to mean anything"
    assert "ran 1 runs, 0 were already done, 0 skipped for missing data, 0 failed" in out, out
    (run,) = (retried / "runs").glob("test_dies_once_*_seed1_*")
    assert json.loads((run / "timing.json").read_text())["resumed_after_round"] == 2
    assert run_files(retried) == run_files(reference)


@pytest.mark.slow
def test_ctrl_c_stops_a_ray_sweep_and_cancels_its_tasks(tmp_path, monkeypatch, toy_test_checkpoint):
    """docs/scaling-out.md: Ctrl-C stops the sweep and cancels its tasks. The Ray instance
    is this test's, so it outlives the sweep: tasks left running would go on training."""
    import ray

    sweep = TOY_SWEEP.replace("rounds: 2", "rounds: 8, checkpoint_every: 1")
    (tmp_path / "slow.py").write_text(SLOW.replace('"test_slow_promptfl"', '"test_slow_promptfl_on_ray"'))
    runs = tmp_path / "runs"
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        code = reproduce_signalled(
            tmp_path,
            write_sweep(tmp_path, sweep),
            lambda: len(list(runs.glob(".*.checkpoint.json"))) == 2,  # both cells are running
            lambda: signal_self(signal.SIGINT),
            "--executor",
            "ray",
            "--methods",
            str(tmp_path / "slow.py"),
            "--cpus-per-cell",
            "1",
        )
        assert code == 130
        deadline = time.time() + 60
        while time.time() < deadline and list(runs.glob(".*.lock")):
            time.sleep(0.2)
        assert not list(runs.glob(".*.lock")), "a cancelled task ends its run and releases its cell"
        kept = {p.name: p.read_bytes() for p in runs.glob(".*.checkpoint*")}
        assert len([name for name in kept if name.endswith(".checkpoint.json")]) == 2  # for the next run
        time.sleep(10)  # several rounds' time for a task left running
        assert {p.name: p.read_bytes() for p in runs.glob(".*.checkpoint*")} == kept
        assert not list(runs.glob("*_seed*/summary.json")) and not list(runs.glob(".*.lock"))
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_submitit_executor_renders_the_local_table(local_sweep, tmp_path, monkeypatch, capsys):
    from benchmark.sweeps.executors.slurm import SlurmExecutor

    # No Slurm here: submitit's local cluster runs each task as a process of this machine,
    # through the same pickling, submission and result protocol.
    monkeypatch.setattr(SlurmExecutor, "cluster", "local")
    monkeypatch.setattr(SlurmExecutor, "poll_seconds", 0.5)
    assert (
        reproduce(
            tmp_path, write_sweep(tmp_path), "--executor", "slurm", "--slurm-gpus-per-task", "0", "--slurm-time", "20"
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "ran 4 runs, 0 were already done" in out
    assert (tmp_path / "results" / "table.csv").read_bytes() == (local_sweep / "results" / "table.csv").read_bytes()
    assert run_files(tmp_path) == run_files(local_sweep)
    logs = list((tmp_path / "runs" / "slurm-logs").glob("*/*_log.out"))
    assert len(logs) == 4, logs  # one log per task, beside the run folders


@pytest.mark.slow
def test_a_preempted_task_is_requeued_and_resumes_to_the_same_numbers(tmp_path, monkeypatch, toy_test_checkpoint):
    """SIGUSR2 (what Slurm sends a task it preempts) mid-run: submitit calls the job's
    checkpoint hook, the run keeps its last round, the task is requeued and resumes there."""
    from benchmark.runs.locks import lock_path
    from benchmark.sweeps.executors.slurm import SlurmExecutor

    sweep = TOY_SWEEP.replace("rounds: 2", "rounds: 8, checkpoint_every: 1").replace(
        "[zeroshot, promptfl]", "[promptfl]"
    )
    sweep = sweep.replace("seeds: [1, 2]", "seeds: [1]")
    reference = tmp_path / "reference"
    reference.mkdir()
    assert reproduce(reference, write_sweep(reference, sweep)) == 0

    monkeypatch.setattr(SlurmExecutor, "cluster", "local")
    monkeypatch.setattr(SlurmExecutor, "poll_seconds", 0.5)
    preempted = tmp_path / "preempted"
    preempted.mkdir()
    runs = preempted / "runs"
    (name,) = run_files(reference)

    def preempt() -> None:
        holder = json.loads(lock_path(runs / name).read_text())
        os.kill(holder["pid"], signal.SIGUSR2)

    code = reproduce_signalled(
        preempted,
        write_sweep(preempted, sweep),
        (runs / f".{name}.checkpoint.json").is_file,
        preempt,
        "--executor",
        "slurm",
        "--slurm-gpus-per-task",
        "0",
    )
    assert code == 0
    log = next((runs / "slurm-logs").glob("*/*_log.out")).read_text()
    assert "this job is preempted" in log and "Requeued job" in log, log
    timing = json.loads((runs / name / "timing.json").read_text())
    assert timing["resumed_after_round"] >= 1  # resumed from the round checkpoint, not from round 1
    assert run_files(preempted) == run_files(reference)


DIES = """
import os

from benchmark.registry import register_method
from methods.promptfl import PromptFL


@register_method("test_dies_in_training")
class DiesInTraining(PromptFL):
    \"\"\"Test-only: its process ends in training without a word, as one the OOM killer takes.\"\"\"

    def training_step(self, batch, batch_idx):
        os._exit(9)
"""


@pytest.mark.slow
def test_a_task_that_dies_is_a_failed_cell_and_method_files_reach_the_workers(
    tmp_path, monkeypatch, capsys, toy_test_checkpoint
):
    from benchmark.runs.results import read_failure
    from benchmark.sweeps.executors.slurm import SlurmExecutor

    monkeypatch.setattr(SlurmExecutor, "cluster", "local")
    monkeypatch.setattr(SlurmExecutor, "poll_seconds", 0.5)
    (tmp_path / "dies.py").write_text(DIES)
    code = reproduce(
        tmp_path,
        write_sweep(tmp_path),
        "--executor",
        "slurm",
        "--slurm-gpus-per-task",
        "0",
        "--seeds",
        "1",
        "--methods",
        "zeroshot",
        str(tmp_path / "dies.py"),
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "ran 1 runs, 0 were already done, 0 skipped for missing data, 1 failed" in out
    (failed,) = [line for line in out.splitlines() if line.startswith("FAILED ")]
    assert "test_dies_in_training_toy" in failed and "ended without a result" in failed
    (record,) = (tmp_path / "runs").glob("test_dies_in_training_*.failed.json")  # written by the sweep, not the task
    assert "ended without a result" in read_failure(record.with_name(record.name[: -len(".failed.json")]))
    table = (tmp_path / "results" / "table.md").read_text()
    assert any(line.startswith("| test_dies_in_training |") and "failed" in line for line in table.splitlines())


SLOW = """
import time

from benchmark.registry import register_method
from methods.promptfl import PromptFL


@register_method("test_slow_promptfl")
class SlowPromptFL(PromptFL):
    \"\"\"Test-only: PromptFL 0.2 s slower a step (same numbers), so that two cells overlap.\"\"\"

    def training_step(self, batch, batch_idx):
        time.sleep(0.2)
        return super().training_step(batch, batch_idx)
"""


@pytest.mark.slow
def test_a_dead_worker_fails_only_its_cell_and_is_replaced(tmp_path, capsys, toy_test_checkpoint):
    from benchmark.runs.results import read_failure

    # A name of its own: the registry is the process's, and the Slurm test registered DIES's.
    (tmp_path / "dies.py").write_text(DIES.replace('"test_dies_in_training"', '"test_dies_in_a_worker"'))
    code = reproduce(
        tmp_path,
        write_sweep(tmp_path),
        "--workers",
        "2",
        "--cpus-per-cell",
        "1",
        "--methods",
        "zeroshot",
        str(tmp_path / "dies.py"),
    )
    captured = capsys.readouterr()
    assert code == 1, captured
    out = captured.out
    assert "ran 2 runs, 0 were already done, 0 skipped for missing data, 2 failed" in out
    failed = [line for line in out.splitlines() if line.startswith("FAILED ")]
    assert len(failed) == 2 and all("test_dies_in_a_worker_toy" in line for line in failed), failed
    assert all("ended without a result, exit code 9" in line for line in failed), failed
    for record in (tmp_path / "runs").glob("test_dies_in_a_worker_*.failed.json"):
        assert "ended without a result" in read_failure(record.with_name(record.name[: -len(".failed.json")]))
    assert len(list((tmp_path / "runs").glob("zeroshot_*/summary.json"))) == 2  # the other cells ran


@pytest.mark.slow
def test_a_stopped_worker_sweep_keeps_each_running_cells_round_and_resumes_to_the_same_numbers(
    tmp_path, toy_test_checkpoint
):
    """SIGTERM to the sweep while its workers run cells: the command exits 143, each running
    cell keeps its last completed round, and the same command run again resumes them to the
    numbers of a sweep never stopped."""
    sweep = TOY_SWEEP.replace("rounds: 2", "rounds: 8, checkpoint_every: 1")
    (tmp_path / "slow.py").write_text(SLOW)  # long enough cells for both to be running at the signal
    flags = ("--methods", str(tmp_path / "slow.py"), "--cpus-per-cell", "1")
    reference = tmp_path / "reference"
    reference.mkdir()
    assert reproduce(reference, write_sweep(reference, sweep), *flags) == 0
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    runs = stopped / "runs"
    code = reproduce_signalled(
        stopped,
        write_sweep(stopped, sweep),
        lambda: len(list(runs.glob(".*.checkpoint.json"))) == 2,
        lambda: signal_self(signal.SIGTERM),
        "--workers",
        "2",
        *flags,
    )
    assert code == 143
    assert not list(runs.glob("*_seed*/summary.json"))  # neither cell finished ...
    assert len(list(runs.glob(".*.checkpoint.json"))) == 2  # ... and both kept a round
    assert reproduce(stopped, write_sweep(stopped, sweep), "--workers", "2", *flags) == 0
    for run in runs.glob("*_seed*"):
        assert json.loads((run / "timing.json").read_text())["resumed_after_round"] >= 1
    assert run_files(stopped) == run_files(reference)


def fake_slurm(bin_dir: Path, script_copy: Path) -> None:
    """`srun` and `sbatch` stand-ins: sbatch keeps the script it is given and answers as Slurm does."""
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncp \"$1\" {script_copy}\necho 'Submitted batch job 4242'\n")
    for tool in ("srun", "sbatch"):
        (bin_dir / tool).chmod((bin_dir / tool).stat().st_mode | stat.S_IEXEC)


def test_slurm_executor_submits_one_array_with_the_settings(tmp_path, monkeypatch, capsys):
    script = tmp_path / "submitted.sh"
    fake_slurm(tmp_path / "bin", script)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    code = reproduce(
        tmp_path,
        write_sweep(tmp_path),
        "--executor",
        "slurm",
        "--no-wait",
        "--slurm-partition",
        "gpu",
        "--slurm-gpus-per-task",
        "1",
        "--slurm-time",
        "2:30:00",
        "--slurm-account",
        "lab",
        "--slurm-max-running",
        "3",
        "--cpus-per-cell",
        "4",
        "--slurm-mem-gb",
        "16",
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "submitted 4 cells" in out and "run the same command again" in out
    lines = script.read_text().splitlines()
    for flag in (
        "--partition=gpu",
        "--gpus-per-task=1",
        "--time=150",
        "--array=0-3%3",
        "--cpus-per-task=4",
        "--account=lab",
        "--mem=16GB",
        "--signal=USR2@90",
        "--job-name=fedbench",
    ):
        assert f"#SBATCH {flag}" in lines, (flag, lines)
    logs = tmp_path / "runs" / "slurm-logs"
    assert f"#SBATCH --output={logs}/%A_%a/%A_%a_0_log.out" in lines
    assert not [p for p in (tmp_path / "runs").glob("*_seed*")]  # nothing ran here
    assert not (tmp_path / "results" / "table.csv").exists()  # rendered once the cells are there


@pytest.mark.parametrize("executor, module", [("ray", "ray"), ("slurm", "submitit")])
def test_a_missing_engine_names_its_extra(executor, module, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, module, None)  # `import ray` now fails as if not installed
    assert reproduce(tmp_path, write_sweep(tmp_path), "--executor", executor) == 2
    err = capsys.readouterr().err
    assert f"--executor {executor} needs the {module} package" in err and f"pip install 'fedbench[{executor}]'" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--ray-address", "auto"], "--ray-address only apply to --executor ray"),
        (["--executor", "ray", "--slurm-partition", "gpu"], "--slurm-partition only apply to --executor slurm"),
        (["--slurm-gpus-per-task", "0"], "--slurm-gpus-per-task only apply to --executor slurm"),
        (["--executor", "slurm", "--slurm-time", "soon"], "--slurm-time takes minutes"),
        (["--executor", "ray", "--device", "cuda:1"], "device cuda:1 pins every cell to one GPU"),
        (["--executor", "ray", "--workers", "2"], "--workers only apply to --executor local"),
        (["--gpus-per-cell", "0.5"], "--gpus-per-cell only apply to --executor ray"),
    ],
)
def test_flags_that_do_not_fit_the_executor_are_refused(flags, message, tmp_path, capsys):
    assert reproduce(tmp_path, write_sweep(tmp_path), *flags) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cpus_per_cell_must_be_positive(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        reproduce(tmp_path, write_sweep(tmp_path), "--executor", "ray", "--cpus-per-cell", "0")
    assert stop.value.code == 2 and "expected an integer >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, minutes",
    [("240", 240), ("30:30", 31), ("4:00:00", 240), ("1-00:00:00", 1440), ("2-12", 3600), ("0-1:30", 90)],
)
def test_slurm_time_reads_slurms_formats(text, minutes):
    from benchmark.sweeps.executors.slurm import slurm_minutes

    assert slurm_minutes(text) == minutes


def test_a_cell_job_carries_this_process_context_to_its_worker(tmp_path, monkeypatch):
    """What a worker reads besides the config -- working directory, fedbench's environment,
    the torch thread count, method files -- is the sweep's, and restored after the cell."""
    import torch

    from benchmark.sweeps.executors.cells import CellJob
    from benchmark.sweeps.presets import load_preset

    plugin = tmp_path / "half.py"
    plugin.write_text(
        "from benchmark.registry import register_method\nfrom methods.promptfl import PromptFL\n\n"
        "@register_method('test_half_for_jobs')\nclass Half(PromptFL):\n    pass\n"
    )
    from benchmark.registry import load_method_file

    load_method_file(str(plugin))
    monkeypatch.setenv("FEDBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("FEDBENCH_CACHE", raising=False)  # the sweep sets none (the test run may)
    monkeypatch.chdir(tmp_path)
    (cell, *_) = load_preset(str(write_sweep(tmp_path))).cells()
    job = CellJob.prepare(cell, threads=3)
    assert job.cwd == str(tmp_path) and ("FEDBENCH_DATA", str(tmp_path / "data")) in job.env
    assert str(plugin.resolve()) in job.method_files
    # A worker elsewhere, with another environment and thread count:
    monkeypatch.chdir("/")
    monkeypatch.setenv("FEDBENCH_DATA", "/elsewhere")
    monkeypatch.setenv("FEDBENCH_CACHE", "/worker-cache")  # set on the worker only: not the sweep's
    threads = torch.get_num_threads()
    with job.applied():
        assert os.getcwd() == str(tmp_path)
        assert os.environ["FEDBENCH_DATA"] == str(tmp_path / "data") and "FEDBENCH_CACHE" not in os.environ
        assert torch.get_num_threads() == 3
    assert os.getcwd() == "/" and os.environ["FEDBENCH_DATA"] == "/elsewhere"
    assert os.environ["FEDBENCH_CACHE"] == "/worker-cache" and torch.get_num_threads() == threads
