"""`--executor ray`: every cell a Ray task (the `ray` extra, imported only when the cells run)."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from benchmark.config import ConfigError
from benchmark.errors import RunInterrupted
from benchmark.sweeps.executors.base import import_extra, register_executor

if TYPE_CHECKING:
    from benchmark.sweeps.executors.cells import CellJob, Outcome, Started


def run_cell_on_ray(job: CellJob) -> Outcome:
    """`run_cell` as a Ray task, stopped by the sweep's ray.cancel as a stopped local worker's
    cell is: RunInterrupted, so the run keeps its last completed round (with checkpoints on).
    Ray cancels a running task by simulating SIGINT in its worker (`_thread.interrupt_main`);
    under the worker's own default handler that interrupt was lost in fedbench's cells (they
    trained on to their end, Ray 2.55), under a handler installed by the task it arrives."""
    from benchmark.sweeps.executors.cells import run_cell  # lazy: fedbench --help imports no torch

    def stop(signum, frame):
        raise RunInterrupted(signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread sets handlers
        return run_cell(job)
    previous = signal.signal(signal.SIGINT, stop)
    try:
        return run_cell(job)
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


# Ray reruns a task whose worker process or node died (a system failure, not an exception
# of the cell) this many times; the rerun resumes from the cell's round checkpoint.
MAX_RETRIES = 3
WAIT_SECONDS = 0.5  # how long a stop (Ctrl-C, SIGTERM) may wait to be acted on


@contextmanager
def _stops_noted() -> Iterator[list[int]]:
    """SIGINT / SIGTERM noted, not raised, in the block. ray.wait runs Python's signal
    handlers inside its C++ loop and takes only a KeyboardInterrupt for a stop: fedbench's
    RunInterrupted raised there came out as a SystemError (a traceback instead of exit 130 /
    143), after which ray.cancel stopped only one of the running tasks (seen with Ray 2.55)."""
    stops: list[int] = []
    if threading.current_thread() is not threading.main_thread():  # handlers live on the main thread
        yield stops
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum, handler in previous.items():
        if handler is not None:
            signal.signal(signum, lambda signum, frame: stops.append(signum))
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back (nor was it replaced)
                signal.signal(signum, handler)


def gpu_share(text: str) -> float:
    """--gpus-per-cell: a fraction of one GPU (0 < F <= 1) or a whole number of GPUs, as Ray takes them."""
    import argparse

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 1 or (value > 1 and value.is_integer())):
        raise argparse.ArgumentTypeError(
            f"expected a fraction of a GPU in (0, 1] or a whole number of GPUs, got {text!r}"
        )
    return value


@register_executor("ray")
class RayExecutor:
    """Every cell a Ray task, on the cluster at `address` (ray.init(address=...)) or on a Ray
    instance started here over every CPU and GPU of this machine (one already initialized in
    this process is used as it is). A cell takes `gpus_per_cell` GPUs where the cluster has
    GPUs (unless its device is cpu): 1 by default, a fraction such as 0.25 to run four cells
    on each GPU; else `threads` CPUs. A task whose worker dies (a node lost) is retried
    by Ray (MAX_RETRIES times) and resumes from the cell's round checkpoint. A stop (Ctrl-C,
    SIGTERM) cancels the tasks still pending or running."""

    summary = "each cell a Ray task, with one GPU where the cluster has GPUs, else with as many CPUs as it has threads"
    extra = "ray"
    waits = True

    def __init__(
        self, address: str | None = None, cpus_per_cell: int | None = None, gpus_per_cell: float = 1.0
    ) -> None:
        self.address = address
        self.cpus_per_cell = cpus_per_cell
        self.gpus_per_cell = gpus_per_cell

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--ray-address",
            metavar="ADDR",
            help="join this Ray cluster (ray.init(address=ADDR), e.g. auto or HOST:6379; default: $RAY_ADDRESS, "
            "else start a local Ray instance over this machine's CPUs and GPUs)",
        )
        group.add_argument(
            "--gpus-per-cell",
            type=gpu_share,
            metavar="F",
            help="ray: GPUs each cell reserves where the cluster has GPUs: a fraction shares one, e.g. 0.25 runs "
            "four cells on each GPU (memory permitting; default: 1)",
        )

    @classmethod
    def from_args(cls, args) -> "RayExecutor":
        return cls(args.ray_address, args.cpus_per_cell, args.gpus_per_cell or 1.0)

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        from benchmark.sweeps.executors.cells import lost  # lazy: fedbench --help imports no torch

        ray = import_extra("ray")
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
            task = ray.remote(run_cell_on_ray)
            gpus = ray.cluster_resources().get("GPU", 0)
            node_cpus = max((n["Resources"].get("CPU", 0) for n in ray.nodes() if n["Alive"]), default=0)
            for job in jobs:
                resources = self.resources(job, gpus, node_cpus)
                options = dict(name=f"fedbench cell {job.name}", max_retries=MAX_RETRIES, **resources)
                pending[task.options(**options).remote(job)] = job
            while pending:
                with _stops_noted() as stops:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_SECONDS)
                if stops:
                    raise RunInterrupted(stops[0])
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
            return {"num_gpus": self.gpus_per_cell, "num_cpus": self.cpus_per_cell or 1}
        if job.threads > node_cpus:
            raise ConfigError(
                f"each cell computes with {job.threads} CPU threads but no Ray node has more than {node_cpus:g} CPUs; "
                "pass --cpus-per-cell N (N at most the CPUs of a node)"
            )
        return {"num_cpus": job.threads}
