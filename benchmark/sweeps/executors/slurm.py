"""`--executor slurm`: the cells as one Slurm job array through submitit (the `slurm` extra,
imported only when the cells are submitted)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from benchmark.config import ConfigError
from benchmark.sweeps.executors.base import import_extra, natural_int, positive_float, positive_int, register_executor

if TYPE_CHECKING:
    from benchmark.sweeps.executors.cells import CellJob, Outcome, Started

DEFAULT_TIME = "4:00:00"


@register_executor("slurm")
class SlurmExecutor:
    """The cells as one Slurm job array submitted with submitit, one task per cell, each with
    `threads` CPUs and `gpus_per_task` GPUs; logs go to <out>/slurm-logs/. On preemption or
    timeout submitit calls `CellJob.checkpoint`: the run saves its last completed round and
    the task is requeued, resuming there. `wait`: follow the tasks and render the table at
    the end; else submit and return (`fedbench reproduce` run again renders it)."""

    summary = (
        "a Slurm job array through submitit, one task per cell, requeued and resumed from its round checkpoint "
        "when preempted"
    )
    extra = "submitit"
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

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument("--slurm-partition", metavar="P", help="Slurm partition (default: the cluster's default)")
        group.add_argument(
            "--slurm-gpus-per-task",
            type=natural_int,
            metavar="N",
            help="GPUs per cell (default: 1; 0 on a CPU partition)",
        )
        group.add_argument(
            "--slurm-time",
            metavar="T",
            help="time limit per task, minutes or [DAYS-]HOURS:MINUTES:SECONDS (default: 4:00:00); 90 s before it "
            "a task saves its last round and is requeued to resume there (at most 3 times; preemptions: always)",
        )
        group.add_argument(
            "--slurm-mem-gb", type=positive_float, metavar="G", help="memory per task in GB (default: the partition's)"
        )
        group.add_argument("--slurm-account", metavar="A", help="Slurm account to charge")
        group.add_argument("--slurm-qos", metavar="Q", help="Slurm quality of service")
        group.add_argument(
            "--slurm-max-running", type=positive_int, metavar="N", help="at most N tasks of the array at once"
        )
        group.add_argument(
            "--no-wait",
            action="store_true",
            default=None,  # None: not given (a flag of the slurm executor only)
            help="slurm: submit and return; run the same command again once the tasks are done to render the table",
        )

    @classmethod
    def from_args(cls, args) -> "SlurmExecutor":
        return cls(
            args.slurm_partition,
            1 if args.slurm_gpus_per_task is None else args.slurm_gpus_per_task,
            slurm_minutes(args.slurm_time or DEFAULT_TIME),
            args.slurm_mem_gb,
            args.slurm_account,
            args.slurm_qos,
            args.slurm_max_running,
            wait=not args.no_wait,
        )

    def submitit_executor(self, folder: Path, threads: int):
        """The submitit executor with every setting of the sbatch script."""
        submitit = import_extra("slurm")
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

        from benchmark.sweeps.executors.cells import lost  # lazy: fedbench --help imports no torch

        folder = Path(jobs[0].cwd) / jobs[0].cell.config.out / "slurm-logs" / "%j"
        executor = self.submitit_executor(folder, jobs[0].threads)
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
