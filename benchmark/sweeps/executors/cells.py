"""The unit of work of every executor: one missing cell shipped to a worker (`CellJob`) and
run there (`run_cell`): under the cell's lock, into its run folder (or its failure recorded
beside it), exactly as a local sweep runs it, returning what happened (`Outcome`).

A `CellJob` carries what a cell's numbers may depend on beyond its config -- the working
directory (relative paths in the config), fedbench's environment variables (data root,
caches, plugins), the torch thread count and the method files loaded here -- so a worker
computes what this process would have, whatever its own directory, environment or core
count. This module loads torch (the executors import it where they run the cells).
"""

from __future__ import annotations

import os
import platform
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from benchmark.config import ConfigError
from benchmark.errors import CellBusy, DivergenceError, UserError
from benchmark.registry import load_method_file, loaded_method_files
from benchmark.runs.checkpoints import save_before_preemption
from benchmark.runs.identity import run_name
from benchmark.runs.locks import cell_lock
from benchmark.runs.results import is_complete, record_failure
from benchmark.runs.runner import run_experiment
from benchmark.runs.tracking import Tracker
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.tables import run_dir

# The environment a cell reads (fedbench's own variables, W&B's and the weight caches'),
# carried from the sweep to its workers. Not WANDB_API_KEY: workers log in on their own.
CARRIED_ENV = (
    "FEDBENCH_",
    "WANDB_MODE",
    "WANDB_DIR",
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_RUN_GROUP",
    "WANDB_NAME",
    "WANDB_TAGS",
    "WANDB_SILENT",
    "HF_HOME",
    "HF_HUB_CACHE",
    "HF_HUB_OFFLINE",
    "TORCH_HOME",
)


@dataclass(frozen=True)
class Outcome:
    status: str  # ran | done_elsewhere | busy | failed (| interrupted: only between a local worker and its sweep)
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
            with Tracker.for_run(cell.config, job_type=cell.label, tags=job.tags, deferred=True) as tracker:
                run_experiment(cell.config, tracker=tracker, progress=False)
        return Outcome("ran")
    except CellBusy as busy:  # another process is running it now: never twice
        return Outcome("busy", str(busy))
    except Exception as exc:  # one broken cell must not lose the rest of the sweep
        error = f"{exc.__class__.__name__}: {exc}"
        record_failure(folder, error, cell.config.to_dict())
        expected = isinstance(exc, (DivergenceError, UserError))
        return Outcome("failed", error, "" if expected else traceback.format_exc())


def lost(job: CellJob, error: str) -> Outcome:
    """A cell whose worker ended without an outcome (killed, node lost, out of memory):
    recorded as failed here, so that the table shows it and the next sweep reruns it."""
    if not is_complete(run_dir(job.cell)):
        record_failure(run_dir(job.cell), error)
    return Outcome("failed", error)


Started = Callable[[CellJob], None]
