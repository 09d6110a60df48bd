"""`--executor ray`: every cell a Ray task (the `ray` extra, imported only when the cells run)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterator

from benchmark.config import ConfigError
from benchmark.sweeps.executors import import_extra, register_executor

if TYPE_CHECKING:
    from benchmark.sweeps.executors.cells import CellJob, Outcome, Started


@register_executor("ray")
class RayExecutor:
    """Every cell a Ray task, on the cluster at `address` (ray.init(address=...)) or on a Ray
    instance started here over every CPU and GPU of this machine (one already initialized in
    this process is used as it is). A cell takes one GPU where the cluster has GPUs (unless
    its device is cpu), else `threads` CPUs. A task whose worker dies (a node lost) is retried
    by Ray and resumes from the cell's round checkpoint."""

    summary = "each cell a Ray task, with one GPU where the cluster has GPUs, else with as many CPUs as it has threads"
    extra = "ray"
    waits = True

    def __init__(self, address: str | None = None, cpus_per_cell: int | None = None) -> None:
        self.address = address
        self.cpus_per_cell = cpus_per_cell

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument(
            "--ray-address",
            metavar="ADDR",
            help="join this Ray cluster (ray.init(address=ADDR), e.g. auto or HOST:6379; default: $RAY_ADDRESS, "
            "else start a local Ray instance over this machine's CPUs and GPUs)",
        )

    @classmethod
    def from_args(cls, args) -> "RayExecutor":
        return cls(args.ray_address, args.cpus_per_cell)

    def run(self, jobs: list[CellJob], started: Started) -> Iterator[tuple[CellJob, Outcome]]:
        from benchmark.sweeps.executors.cells import lost, run_cell  # lazy: fedbench --help imports no torch

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
