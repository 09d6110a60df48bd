"""Where the missing cells of a sweep run: on this machine (`local`: one after another in
this process, or `workers` at a time in worker processes), as Ray tasks (`ray`), or as a
Slurm job array through submitit (`slurm`).

Whichever engine runs it, the unit of work is the cell: `run_cell` takes the cell's lock,
runs it into its run folder (or records its failure) exactly as a local sweep does, and
returns what happened. A `CellJob` carries what a cell's numbers may depend on beyond its
config -- the working directory (relative paths in the config), fedbench's environment
variables (data root, caches, plugins), the torch thread count and the method files loaded
here -- so a worker computes what this process would have, whatever its own directory,
environment or core count. Ray and submitit are optional extras, imported only here.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import platform
import signal
import traceback
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from benchmark.config import ConfigError
from benchmark.errors import CellBusy, DivergenceError, RunInterrupted, UserError
from benchmark.registry import load_method_file, loaded_method_files
from benchmark.runs.checkpoints import save_before_preemption
from benchmark.runs.identity import run_name
from benchmark.runs.locks import cell_lock
from benchmark.runs.results import is_complete, record_failure
from benchmark.runs.runner import run_experiment
from benchmark.runs.tracking import Tracker
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.tables import run_dir

ENGINES = {"ray": "ray", "slurm": "submitit"}  # executor -> the module its extra installs

# The environment a cell reads (fedbench's own variables, W&B's and the weight caches'),
# carried from the sweep to its workers. Not WANDB_API_KEY: workers log in on their own.
CARRIED_ENV = (
    "FEDBENCH_",
    "WANDB_MODE",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_SILENT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TORCH_HOME",
)


def engine(executor: str):
    """The engine module of `executor`, or a ConfigError (CLI exit 2) naming the extra."""
    module = ENGINES[executor]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"--executor {executor} needs the {module} package, which is not installed ({exc}); "
            f"install the extra: pip install 'fedbench[{executor}]' "
            f"(in a clone: pip install -c constraints.txt -e '.[{executor}]')"
        ) from None


@dataclass(frozen=True)
class Outcome:
    status: str  # ran | done_elsewhere | busy | failed
    detail: str = ""  # failed: the error; busy: who is running the cell
    traceback: str = ""  # an unexpected error's traceback (the sweep prints it)


@dataclass(frozen=True)
class CellJob:
    """One missing cell as shipped to a worker, with this process's context (module doc)."""

    cell: Cell
    force: bool
    tags: tuple[str, ...]
    threads: int  # torch intra-op threads: CPU arithmetic may depend on it
    cwd: str
    env: tuple[tuple[str, str], ...]
    method_files: tuple[str, ...]

    @classmethod
    def prepare(
        cls, cell: Cell, force: bool = False, tags: tuple[str, ...] = (), threads: int | None = None
    ) -> "CellJob":
        import torch

        env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(CARRIED_ENV)))
        return cls(
            cell, force, tuple(tags), threads or torch.get_num_threads(), os.getcwd(), env, tuple(loaded_method_files())
        )

    @property
    def name(self) -> str:
        return run_name(self.cell.config)

    def __call__(self) -> Outcome:
        """Run the cell (what submitit calls in the Slurm task)."""
        return run_cell(self)

    def checkpoint(self):
        """submitit's hook on preemption or timeout: keep the last completed round of the run
        in progress, then requeue this same job, which resumes from that round."""
        from submitit.helpers import DelayedSubmission

        save_before_preemption()
        return DelayedSubmission(self)

    @contextmanager
    def applied(self) -> Iterator[None]:
        """This process set up as the sweep's (restored after: a Ray worker runs many tasks)."""
        import torch

        try:
            before_cwd = os.getcwd()
        except OSError:
            before_cwd = None
        before_env = {k: v for k, v in os.environ.items() if k.startswith(CARRIED_ENV)}
        before_threads = torch.get_num_threads()
        try:
            os.chdir(self.cwd)
        except OSError as exc:
            raise ConfigError(
                f"the sweep's working directory {self.cwd} cannot be entered on {platform.node()} ({exc.strerror}); "
                "a sweep's workers need the file system of the machine that started it (run folders, data, weights)"
            ) from None
        try:
            for name in before_env:
                del os.environ[name]
            os.environ.update(self.env)
            torch.set_num_threads(self.threads)
            for spec in self.method_files:
                load_method_file(spec)
            yield
        finally:
            for name in [k for k in os.environ if k.startswith(CARRIED_ENV)]:
                del os.environ[name]
            os.environ.update(before_env)
            torch.set_num_threads(before_threads)
            if before_cwd is not None:
                os.chdir(before_cwd)


def run_cell(job: CellJob) -> Outcome:
    """Run one cell under its lock into its run folder; a failure is recorded beside it (the
    table shows the cell failed), a cell another process finished meanwhile is not rerun."""
    with job.applied():
        return _run_cell(job)


def _run_cell(job: CellJob) -> Outcome:

    cell, folder = job.cell, run_dir(job.cell)
    try:
        with cell_lock(folder):
            if not job.force and is_complete(folder):  # another sweep finished it meanwhile
                return Outcome("done_elsewhere")
            with Tracker.for_run(cell.config, job_type=cell.label, tags=job.tags) as tracker:
                run_experiment(cell.config, tracker=tracker, progress=False)
        return Outcome("ran")
    except CellBusy as busy:  # another process is running it now: never twice
        return Outcome("busy", str(busy))
    except Exception as exc:  # one broken cell must not lose the rest of the sweep
        error = f"{exc.__class__.__name__}: {exc}"
        record_failure(folder, error)
        expected = isinstance(exc, (DivergenceError, UserError))
        return Outcome("failed", error, "" if expected else traceback.format_exc())


def lost(job: CellJob, error: str) -> Outcome:
    """A cell whose worker ended without an outcome (killed, node lost, out of memory):
    recorded as failed here, so that the table shows it and the next sweep reruns it."""
    if not is_complete(run_dir(job.cell)):
        record_failure(run_dir(job.cell), error)
    return Outcome("failed", error)


Started = Callable[[CellJob], None]


class LocalExecutor:
    """The cells on this machine: one after another in this process (`workers` 1, the
    default), or `workers` at a time, each in a worker process (spawned, so that no torch
    thread pool or lock is copied half-held) that runs the cells it is sent one at a time.
    Small models use a core badly through many threads (per-op overhead), so a few cells
    side by side with a thread each finish sooner than one after another with them all."""

    name = "local"
    waits = True

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        if self.workers > 1 and len(jobs) > 1:
            yield from _run_in_workers(jobs, started, min(self.workers, len(jobs)))
            return
        for job in jobs:
            started(job)
            yield job, run_cell(job)


def _run_in_workers(jobs: list[CellJob], started: Started, count: int) -> Iterator[tuple[CellJob, Outcome]]:
    """Keep `count` workers busy until every job has an outcome. A worker that dies takes
    only its own cell (recorded failed, as a dead Ray or Slurm task's) and is replaced.
    Stopped (Ctrl-C, SIGTERM, the sweep closing this generator), the running cells are
    signalled and keep their last completed round, as a stopped local run does."""
    from multiprocessing.connection import wait

    context = multiprocessing.get_context("spawn")
    waiting = deque(jobs)
    workers: list[_Worker] = []
    try:
        while True:
            idle = [w for w in workers if w.job is None]
            while waiting and (idle or len(workers) < count):
                worker = idle.pop() if idle else _Worker(context)
                if worker not in workers:
                    workers.append(worker)
                job = waiting.popleft()
                started(job)
                worker.start(job)
            busy = [w for w in workers if w.job is not None]
            if not busy:
                return
            ready = set(wait([w.conn for w in busy] + [w.process.sentinel for w in busy]))
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    result = worker.finish()
                    if not worker.process.is_alive():
                        worker.close()
                        workers.remove(worker)
                    yield result
    except BaseException:
        for worker in workers:
            if worker.job is not None:
                worker.process.terminate()
        raise
    finally:
        for worker in workers:
            worker.close()


class _Worker:
    """A worker process of `LocalExecutor` and the job it is running (None: idle)."""

    def __init__(self, context) -> None:
        self.conn, child = context.Pipe()
        # Not a daemon, which could not start a cell's data-loader workers; it still ends with
        # the sweep, even one killed, as its pipe then closes.
        self.process = context.Process(target=_serve, args=(child,), name="fedbench-cell-worker")
        self.process.start()
        child.close()
        self.job: CellJob | None = None

    def start(self, job: CellJob) -> None:
        self.conn.send(job)
        self.job = job

    def finish(self) -> tuple[CellJob, Outcome]:
        """The running job and its outcome, once the worker answered or ended."""
        job, self.job = self.job, None
        try:
            outcome = self.conn.recv() if self.conn.poll() else None
        except (EOFError, OSError):
            outcome = None
        if outcome is None:
            self.process.join(timeout=10)
            return job, lost(
                job,
                f"its worker process (pid {self.process.pid}) ended without a result, exit code "
                f"{self.process.exitcode} (killed? out of memory?)",
            )
        if outcome.status == "interrupted":  # signalled by someone else than this sweep
            return job, lost(
                job,
                f"its worker process (pid {self.process.pid}) was {outcome.detail}; the next sweep "
                "resumes it from its last round checkpoint, if one was written",
            )
        return job, outcome

    def close(self) -> None:
        """End the worker: its pipe closes, so it returns once its cell (if stopping) saved its
        last round."""
        self.conn.close()
        self.process.join(timeout=120)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


_cell_running = False  # in a worker process: a cell is running now
_stopping = False  # in a worker process: a signal has stopped its cell


def _stop_cell(signum, frame) -> None:
    """A worker's SIGINT / SIGTERM handler: the running cell stops as a local run does
    (RunInterrupted: it keeps its last round); once only, so that the sweep's own SIGTERM
    after a Ctrl-C (which reaches the whole process group) cannot cut that save short.
    Idle, the worker ignores the signal and ends when the sweep closes its pipe."""
    global _stopping
    if _cell_running and not _stopping:
        _stopping = True
        raise RunInterrupted(signum)


def _serve(conn) -> None:
    """A worker's loop: run each cell received, send back its outcome, until the pipe closes."""
    global _cell_running, _stopping
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stop_cell)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        _cell_running, _stopping = True, False
        try:
            outcome = run_cell(job)
        except RunInterrupted as stop:
            outcome = Outcome("interrupted", str(stop))
        finally:
            _cell_running = False
        try:
            conn.send(outcome)
        except OSError:  # the sweep is gone or stopping
            return


class RayExecutor:
    """Every cell a Ray task, on the cluster at `address` (ray.init(address=...)) or on a Ray
    instance started here over every CPU and GPU of this machine (one already initialized in
    this process is used as it is). A cell takes one GPU where the cluster has GPUs (unless
    its device is cpu), else `threads` CPUs. A task whose worker dies (a node lost) is retried
    by Ray and resumes from the cell's round checkpoint."""

    name = "ray"
    waits = True

    def __init__(self, address: str | None = None, cpus_per_cell: int | None = None) -> None:
        self.address = address
        self.cpus_per_cell = cpus_per_cell

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        ray = engine("ray")
        address = self.address or os.environ.get("RAY_ADDRESS")
        started_here = not ray.is_initialized()
        if started_here:
            from tqdm.auto import tqdm

            tqdm.write(f"joining the Ray cluster at {address}" if address else "starting a local Ray instance")
            try:
                ray.init(address=address) if address else ray.init(include_dashboard=False)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"join the Ray cluster at {address}" if address else "start a local Ray instance"
                raise ConfigError(f"cannot {where}: {exc}") from None
        pending: dict = {}
        try:
            task = ray.remote(run_cell)
            gpus = ray.cluster_resources().get("GPU", 0)
            node_cpus = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]), default=0)
            for job in jobs:
                resources = self.resources(job, gpus, node_cpus)
                pending[task.options(name=f"fedbench cell {job.name}", **resources).remote(job)] = job
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    job = pending.pop(ref)
                    try:
                        outcome = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        cause = getattr(exc, "cause", None) or exc
                        outcome = lost(
                            job,
                            f"Ray task ended without a result: {cause.__class__.__name__}: "
                            f"{str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}",
                        )
                    yield job, outcome
        except BaseException:
            for ref in pending:  # a stopped sweep stops its tasks (their cells resume later)
                ray.cancel(ref)
            raise
        finally:
            if started_here:
                ray.shutdown()

    def resources(self, job: CellJob, gpus: float, node_cpus: float) -> dict[str, float]:
        if gpus and job.cell.config.device != "cpu":
            return {"num_gpus": 1, "num_cpus": self.cpus_per_cell or 1}
        if job.threads > node_cpus:
            raise ConfigError(
                f"each cell computes with {job.threads} CPU threads but no Ray node has more than {node_cpus:g} CPUs; "
                "pass --cpus-per-cell N (N at most the CPUs of a node)"
            )
        return {"num_cpus": job.threads}


class SlurmExecutor:
    """The cells as one Slurm job array submitted with submitit, one task per cell, each with
    `threads` CPUs and `gpus_per_task` GPUs; logs go to <out>/slurm-logs/. On preemption or
    timeout submitit calls `CellJob.checkpoint`: the run saves its last completed round and
    the task is requeued, resuming there. `wait`: follow the tasks and render the table at
    the end; else submit and return (`fedbench reproduce` run again renders it)."""

    name = "slurm"
    cluster = "slurm"  # submitit's cluster; the tests use "local" (each task a process here)
    poll_seconds = 5.0

    def __init__(
        self,
        partition: str | None = None,
        gpus_per_task: int = 1,
        time_minutes: int = 240,
        mem_gb: float | None = None,
        account: str | None = None,
        qos: str | None = None,
        max_running: int | None = None,
        wait: bool = True,
    ) -> None:
        self.partition, self.gpus_per_task, self.time_minutes = partition, gpus_per_task, time_minutes
        self.mem_gb, self.account, self.qos, self.max_running = mem_gb, account, qos, max_running
        self.waits = wait

    def executor(self, folder: Path, threads: int):
        """The submitit executor with every setting of the sbatch script."""
        submitit = engine("slurm")
        executor = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
        slurm = {
            "partition": self.partition,
            "gpus_per_task": self.gpus_per_task or None,
            "account": self.account,
            "qos": self.qos,
            "array_parallelism": self.max_running,
        }
        executor.update_parameters(
            name="fedbench",
            timeout_min=self.time_minutes,
            cpus_per_task=threads,
            mem_gb=self.mem_gb,
            stderr_to_stdout=True,
            **{f"slurm_{k}": v for k, v in slurm.items() if v is not None},
        )
        return executor

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        from submitit.helpers import as_completed
        from tqdm.auto import tqdm

        folder = Path(jobs[0].cwd) / jobs[0].cell.config.out / "slurm-logs" / "%j"
        executor = self.executor(folder, jobs[0].threads)
        with executor.batch():
            handles = [executor.submit(job) for job in jobs]
        array = handles[0].job_id.split("_")[0]
        tqdm.write(f"submitted {len(handles)} cells as {self.cluster} job {array}; logs in {folder.parent}")
        if not self.waits:
            return
        job_of = {id(h): job for h, job in zip(handles, jobs)}
        try:
            for handle in as_completed(handles, poll_frequency=self.poll_seconds):
                job = job_of[id(handle)]
                try:
                    outcome = handle.result()
                except Exception as exc:  # the task died, or was not requeued (timed out too often)
                    outcome = lost(
                        job,
                        f"Slurm task {handle.job_id} ended without a result: {_reason(exc)} "
                        f"(log: {handle.paths.stdout})",
                    )
                yield job, outcome
        except BaseException as exc:
            if not isinstance(exc, GeneratorExit):
                tqdm.write(
                    f"the submitted tasks keep running (scancel {array} stops them); "
                    "run the same command again to follow them and render the table"
                )
            raise


def _reason(exc: Exception) -> str:
    """The line of a submitit error that says why: the state of a task that wrote no result
    (killed, out of memory, not requeued), or the last line of the trace of one that raised."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    state = [line for line in lines if "has not produced any output" in line]
    rules = [i for i, line in enumerate(lines) if set(line.strip()) == {"-"}]
    if state:
        return state[0]
    return lines[rules[1] - 1] if len(rules) > 1 else (lines[-1] if lines else exc.__class__.__name__)


def slurm_minutes(text: str) -> int:
    """`--slurm-time` in whole minutes (rounded up): Slurm's forms, MINUTES, MINUTES:SECONDS,
    HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]]."""
    try:
        days, dash, clock = text.strip().rpartition("-")
        parts = [int(p) for p in clock.split(":")]
        if len(parts) > 3 or min(parts) < 0 or (dash and not days):
            raise ValueError(text)
        if days:  # DAYS-HOURS[:MINUTES[:SECONDS]]
            hours, minutes, seconds = (parts + [0, 0])[:3]
            hours += int(days) * 24
        elif len(parts) == 3:  # HOURS:MINUTES:SECONDS
            hours, minutes, seconds = parts
        else:  # MINUTES[:SECONDS]
            hours, (minutes, seconds) = 0, (parts + [0])[:2]
        total = hours * 60 + minutes + seconds / 60
    except ValueError:
        total = 0
    if total <= 0:
        raise ConfigError(
            f"--slurm-time takes minutes or Slurm's [DAYS-]HOURS:MINUTES:SECONDS (e.g. 240, 4:00:00, "
            f"1-00:00:00), got {text!r}"
        )
    return int(-(-total // 1))
