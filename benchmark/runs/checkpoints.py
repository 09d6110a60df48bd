"""Round checkpoints: a run that is killed or preempted resumes at the last round it saved
and ends with the same metrics.csv and summary.json as a run never interrupted.

A checkpoint is the hidden file `<out>/.<run name>.checkpoint.pt` beside the run folder
(the run name carries the config hash, so only the same cell can resume from it): the
round loop's `state_dict()` (`benchmark.federation.round_loop.RoundLoop`: every client's
state, aggregate, bank, rounds so far, RNG states; its keys are format 1's "federation",
the same since before the loop was an object, so older checkpoints still resume), the
metric rows written so far and the W&B run id, which a small sidecar
`.<run name>.checkpoint.json` also holds so that tracking can resume the same W&B run
before the checkpoint is read. Both are replaced atomically (write, then rename) and
removed once the run folder exists, unless `keep_checkpoints` is set.
"""

from __future__ import annotations

import json
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from benchmark.errors import RunInterrupted
from benchmark.federation.round_loop import check_state_dict
from benchmark.files import atomic_write
from benchmark.runs.results import MetricRow

FORMAT = 1
# checkpoint_every = -1: save at the end of a round once this long has passed since the
# last save (or the start), so short runs never pay for checkpoints and long ones lose
# at most a few minutes.
AUTO_INTERVAL_SECONDS = 300.0


# What each run in progress in this process does to keep its last completed round now
# (`save_before_preemption`).
_KEEP_NOW: list[Callable[[], None]] = []


@contextmanager
def kept_on_preemption(keep: Callable[[], None]) -> Iterator[None]:
    """While in this block, `save_before_preemption()` calls `keep`."""
    _KEEP_NOW.append(keep)
    try:
        yield
    finally:
        _KEEP_NOW.remove(keep)


def save_before_preemption() -> None:
    """Save the last completed round of every run in progress in this process, for a
    scheduler that stops the process right after (submitit's checkpoint hook on Slurm
    preemption or timeout): the requeued job resumes there, losing only the round in progress."""
    for keep in list(_KEEP_NOW):
        keep()


def checkpoint_path(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.checkpoint.pt"


def sidecar_path(run_dir: Path) -> Path:
    return checkpoint_path(run_dir).with_suffix(".json")


def read_sidecar(run_dir: Path) -> dict | None:
    """The checkpoint's sidecar (round, W&B run id, the run's config), None when absent or damaged."""
    try:
        sidecar = json.loads(sidecar_path(run_dir).read_text())
    except (OSError, ValueError):
        return None
    return sidecar if isinstance(sidecar, dict) else None


def saved_round(run_dir: Path) -> int | None:
    """The rounds completed by the cell's round checkpoint on disk; None when it has none."""
    if not checkpoint_path(run_dir).is_file():
        return None
    sidecar = read_sidecar(run_dir)
    done = sidecar.get("round") if sidecar else None
    return done if isinstance(done, int) and done > 0 else None


def resume_note(run_dir: Path, every: int | None = None) -> str:
    """Whether the stopped run of `run_dir` left a round checkpoint, and from which round the
    same command goes on (`every`: its checkpoint_every, to say why there is none)."""
    run_dir = Path(run_dir)
    done = saved_round(run_dir)
    if done is not None:
        return (
            f"{run_dir.name}: a round checkpoint was written after round {done} ({checkpoint_path(run_dir)}); "
            f"the same command resumes it from round {done + 1}"
        )
    why = "round checkpoints are off (--checkpoint-every 0)" if every == 0 else "it stopped before a round finished"
    return f"{run_dir.name}: no round checkpoint was written ({why}); the same command starts it from round 1"


def saved_wandb_run_id(run_dir: Path) -> str | None:
    """The W&B run id of the cell's checkpoint, so a resumed run continues that W&B run."""
    try:
        return json.loads(sidecar_path(run_dir).read_text()).get("wandb_run_id")
    except (OSError, ValueError, AttributeError):
        return None


@dataclass
class RunCheckpoint:
    federation: dict  # the round loop's `state_dict()` after its last completed round
    rows: list  # benchmark.runs.results.MetricRow, in the order they were written
    wandb_run_id: str | None
    partition_hash: str

    @property
    def next_round(self) -> int:
        """The rounds completed: the run goes on with the next one (0-based index)."""
        return self.federation["next_round"]


class Checkpointer:
    """Decides when a round is saved (`every` K rounds, -1 = by time, 0 = never), saves,
    loads and removes the checkpoint of one run folder."""

    def __init__(self, run_dir: Path, every: int, partition_hash: str, config: dict | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.config = config  # the run's resolved config, in the sidecar: `fedbench runs` shows it
        self.path = checkpoint_path(run_dir)
        self.every = every
        self.partition_hash = partition_hash
        self.last_save = time.monotonic()
        self.saved_round = 0
        self._saving = False  # a save asked for from a signal handler while one is being written

    def saved(self, completed_rounds: int) -> bool:
        return self.saved_round >= completed_rounds

    def due(self, completed_rounds: int) -> bool:
        if self.every > 0:
            return completed_rounds % self.every == 0
        if self.every < 0:
            return time.monotonic() - self.last_save >= AUTO_INTERVAL_SECONDS
        return False

    def save(self, checkpoint: RunCheckpoint) -> None:
        if self._saving:  # called again from a signal handler: the save under way is the same round
            return
        self._saving = True
        try:
            self._save(checkpoint)
        finally:
            self._saving = False

    def _save(self, checkpoint: RunCheckpoint) -> None:
        payload = {
            "format": FORMAT,
            "partition_hash": checkpoint.partition_hash,
            "federation": checkpoint.federation,
            "rows": [row.__dict__ for row in checkpoint.rows],
            "wandb_run_id": checkpoint.wandb_run_id,
        }
        atomic_write(self.path, lambda tmp: torch.save(payload, tmp))
        sidecar = {
            "round": checkpoint.next_round,
            "wandb_run_id": checkpoint.wandb_run_id,
            **({"config": self.config} if self.config is not None else {}),
        }
        atomic_write(sidecar_path(self.run_dir), json.dumps(sidecar))
        self.last_save = time.monotonic()
        self.saved_round = checkpoint.next_round

    def load(self) -> RunCheckpoint | None:
        """The saved checkpoint, or None when there is none or it cannot be used (then the
        run starts over, with a warning: a checkpoint can only save time, never change numbers)."""

        if not self.path.is_file():
            return None
        try:
            payload = torch.load(self.path, map_location="cpu", weights_only=False)
            if payload.get("format") != FORMAT:
                raise ValueError(f"format {payload.get('format')!r}, expected {FORMAT}")
            if payload["partition_hash"] != self.partition_hash:
                raise ValueError("it was made on another partition of the data")
            check_state_dict(payload["federation"])
            return RunCheckpoint(
                payload["federation"],
                [MetricRow(**row) for row in payload["rows"]],
                payload.get("wandb_run_id"),
                payload["partition_hash"],
            )
        except Exception as exc:  # a damaged or foreign checkpoint must not stop the run
            warnings.warn(
                f"round checkpoint {self.path} cannot be used ({exc.__class__.__name__}: {exc}); "
                "the run starts from round 1"
            )
            return None

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        sidecar_path(self.run_dir).unlink(missing_ok=True)


class RoundKeeper:
    """One run's round checkpoints as its rounds go: the checkpoint it resumes from, each
    round's loop state saved when due, and the last completed round kept when the run is stopped
    (preemption, a time limit), so the rerun loses only the round in progress. `rows` is the
    run's list of metric rows (saved with each round); `every` 0: no checkpoints."""

    def __init__(self, run_dir: Path, every: int, partition_hash: str, config: dict, rows: list, tracker=None) -> None:
        self.checkpointer = Checkpointer(run_dir, every, partition_hash, config)
        self.partition_hash, self.rows, self.tracker = partition_hash, rows, tracker
        self.last_round: RunCheckpoint | None = None  # the latest completed round, saved or not

    def resume(self, progress: bool) -> RunCheckpoint | None:
        """The checkpoint to resume from (its rows become the run's first), or None."""
        resume = self.checkpointer.load()
        if resume is not None:
            self.rows.extend(resume.rows)
            if progress:
                name = self.checkpointer.run_dir.name
                print(f"resuming {name} after round {resume.next_round} from its round checkpoint")
        return resume

    def on_checkpoint(self, loop_state: dict) -> None:
        """A round ended: `loop_state` (the round loop's `state_dict()`) and the rows so far
        are the run's last completed round, saved when due."""
        wandb_id = getattr(getattr(self.tracker, "run", None), "id", None)
        self.last_round = RunCheckpoint(loop_state, list(self.rows), wandb_id, self.partition_hash)
        if self.checkpointer.due(self.last_round.next_round):
            self.checkpointer.save(self.last_round)

    def keep_last_round(self) -> None:
        last, checkpointer = self.last_round, self.checkpointer
        if last is not None and checkpointer.every != 0 and not checkpointer.saved(last.next_round):
            checkpointer.save(last)

    @contextmanager
    def kept(self) -> Iterator[None]:
        """Around the rounds: the last completed round is kept on preemption or a stop."""
        try:
            with kept_on_preemption(self.keep_last_round):
                yield
        except RunInterrupted:
            self.keep_last_round()
            raise
