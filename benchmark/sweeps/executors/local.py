"""`--executor local`: the cells on this machine, one after another in this process or
`--workers N` at a time in worker processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections import deque
from typing import TYPE_CHECKING, Iterator

from benchmark.errors import RunInterrupted
from benchmark.sweeps.executors.base import positive_int, register_executor

if TYPE_CHECKING:
    from benchmark.sweeps.executors.cells import CellJob, Outcome, Started


@register_executor("local")
class LocalExecutor:
    """The cells on this machine: one after another in this process (`workers` 1, the
    default), or `workers` at a time, each in a worker process (spawned, so that no torch
    thread pool or lock is copied half-held) that runs the cells it is sent one at a time.
    Small models use a core badly through many threads (per-op overhead), so a few cells
    side by side with a thread each finish sooner than one after another with them all.
    On a machine with GPUs each worker sees one of them (CUDA_VISIBLE_DEVICES), the workers
    spread evenly: `--workers 8` on 4 GPUs runs two cells on each."""

    summary = "one cell after another in this process"
    extra = None
    waits = True

    def __init__(self, workers: int = 1) -> None:
        self.workers = workers

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--workers",
            type=positive_int,
            metavar="N",
            help="local: run N cells at a time, each in a worker process of this machine (default: 1, one after "
            "another in this process); on a GPU machine the workers are spread over its GPUs, one GPU each",
        )

    @classmethod
    def from_args(cls, args) -> "LocalExecutor":
        return cls(args.workers or 1)

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        from benchmark.sweeps.executors.cells import run_cell  # lazy: fedbench --help imports no torch

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
    gpus = gpu_count() if any(job.cell.config.device != "cpu" for job in jobs) else 0
    try:
        while True:
            idle = [w for w in workers if w.job is None]
            while waiting and (idle or len(workers) < count):
                worker = idle.pop() if idle else _Worker(context, least_used_gpu(gpus, [w.gpu for w in workers]))
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


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()  # from the driver: no CUDA context in the sweep's process


def least_used_gpu(gpus: int, taken: list[str | None]) -> str | None:
    """The GPU (its index, as CUDA_VISIBLE_DEVICES takes it) the fewest workers see; None without GPUs."""
    if not gpus:
        return None
    return str(min(range(gpus), key=lambda g: (taken.count(str(g)), g)))


class _Worker:
    """A worker process of `LocalExecutor`, the GPU it sees (None: all, or none) and the job
    it is running (None: idle)."""

    def __init__(self, context, gpu: str | None = None) -> None:
        self.conn, child = context.Pipe()
        self.gpu = gpu
        # Not a daemon, which could not start a cell's data-loader workers; it still ends with
        # the sweep, even one killed, as its pipe then closes.
        self.process = context.Process(target=_serve, args=(child, gpu), name="fedbench-cell-worker")
        self.process.start()
        child.close()
        self.job: CellJob | None = None

    def start(self, job: CellJob) -> None:
        self.conn.send(job)
        self.job = job

    def finish(self) -> tuple[CellJob, Outcome]:
        """The running job and its outcome, once the worker answered or ended."""
        from benchmark.sweeps.executors.cells import lost  # lazy: fedbench --help imports no torch

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


def _serve(conn, gpu: str | None = None) -> None:
    """A worker's loop: run each cell received, send back its outcome, until the pipe closes.
    `gpu`: the one GPU this worker's cells see (set before anything starts CUDA)."""
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    # A spawned process inherits "spawn" as its default start method, so each of a cell's
    # data-loader workers would start a fresh interpreter that imports torch and unpickles
    # the images: a toy PromptFL cell with --set num_workers=1 took 126 s instead of 4 s.
    # The cell starts its processes as `fedbench run` does (the platform's default; fork on
    # Linux): the numbers are the same either way (tests/sweeps/test_executors.py).
    multiprocessing.set_start_method(None, force=True)
    from benchmark.sweeps.executors.cells import Outcome, run_cell  # lazy: fedbench --help imports no torch

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
