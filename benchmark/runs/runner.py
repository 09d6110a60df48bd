"""One experiment from a RunConfig to a run folder, its whole flow in one place (what the folder
holds: docs/run-folders.md; the layers around it: docs/architecture.md): prepare the run
(`benchmark.runs.preparation`), let an engine train it (`benchmark.runs.engines`: the
simulator, Flower, or a saved run), score and record its rounds (`benchmark.runs.recording`),
summarize (`benchmark.runs.summary`) and write the run folder."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark import flops
from benchmark.config import RunConfig
from benchmark.errors import RunInterrupted
from benchmark.evaluation.client_metrics import evaluation_rounds
from benchmark.evaluation.round_selection import EvaluatedRound, check_round_selection
from benchmark.federation.round_loop import FederationResult
from benchmark.memory import PeakMemory
from benchmark.method import state_bytes
from benchmark.runs.checkpoints import RoundKeeper, resume_note
from benchmark.runs.clients_file import save_clients
from benchmark.runs.engines import Engine, Trained, engine_for
from benchmark.runs.identity import prepare_data, prepare_weights, resolved_config, run_name
from benchmark.runs.locks import cell_lock
from benchmark.runs.numerics import computing_as
from benchmark.runs.partition_files import partition_table
from benchmark.runs.prechecks import validate_run
from benchmark.runs.preparation import PreparedRun, prepare_run
from benchmark.runs.recording import RunRecord
from benchmark.runs.results import RUN_FOLDER_BYTES, check_output_location, write_run
from benchmark.runs.summary import classes_short_of_shots, run_summary, run_timing, warn_of_setup


@dataclass
class RunResult:
    config: RunConfig
    summary: dict[str, Any]
    per_client: dict[int, dict[str, float]]
    run_dir: Path | None
    federation: FederationResult
    timing: dict[str, Any]  # wall_seconds, resumed_after_round (timing.json)


def run_experiment(
    config: RunConfig, write: bool = True, progress: bool = True, tracker=None, engine: Engine | None = None
) -> RunResult:
    """Run `config` end to end; write its run folder under `config.out` when `write`,
    holding the cell's lock throughout (another process on the same cell: CellBusy).
    `engine` None: the in-process simulator (or, with `evaluate_from`, the saved run);
    otherwise another engine that runs the federation (`benchmark.runs.flower.FlowerEngine`),
    everything else (rows, summary, run folder) as here."""
    engine = engine_for(config, engine)  # what it cannot run is refused before anything loads
    with computing_as(config):  # the exact shortcuts (or the plain path), compiled blocks or eager
        if not write:
            return _run_experiment(config, False, progress, tracker, engine)
        check_output_location(Path(config.out))  # before any model is built: never lose a run to it
        validate_run(config)  # a typo fails before minutes of pretraining
        prepare_weights(config.pretrained)  # the run's name hashes the weights it loads
        prepare_data(config)  # and the split files it reads
        run_dir = Path(config.out) / run_name(config)
        with cell_lock(run_dir):
            try:
                return _run_experiment(config, True, progress, tracker, engine)
            except RunInterrupted as stop:  # said by the CLI: was a round kept, where does it go on
                stop.notes.append(resume_note(run_dir, config.checkpoint_every if engine.checkpoints else 0))
                raise


def _run_experiment(config: RunConfig, write: bool, progress: bool, tracker, engine: Engine) -> RunResult:
    with flops.ledger() as account:  # the FLOPs this process executes for the run (timing.json)
        return _train_and_evaluate(config, write, progress, tracker, engine, account)


def _train_and_evaluate(
    config: RunConfig, write: bool, progress: bool, tracker, engine: Engine, account: flops.FlopLedger
) -> RunResult:
    """Prepare, train on `engine`, score the final round, summarize, write: the steps of every run."""
    started = time.perf_counter()
    run = prepare_run(config, progress, train_features=engine.trains_here)
    if tracker is not None and hasattr(tracker, "start"):
        tracker.start()  # a deferred W&B run starts now, with the run built: never for a refused one
    check_round_selection(config, run.protocol.metrics)
    run_dir = Path(config.out) / run_name(config)
    keeper = _round_keeper(run, run_dir, write and engine.checkpoints, tracker)
    resume = keeper.resume(progress) if write and engine.checkpoints else None
    record = RunRecord(run, tracker, progress, PeakMemory(cuda=run.device.startswith("cuda")), keeper.rows)
    # the authors' best round is chosen among every round: each is evaluated
    eval_rounds = evaluation_rounds(config.rounds, 1 if config.select_round != "final" else config.eval_every)
    with keeper.kept():
        trained = engine.train(run, record.hooks(eval_rounds, keeper.on_checkpoint if write else None), resume)
    chosen = _score_final_round(record, trained, config.rounds)
    record.rounds_trained(config.rounds, trained.federation)
    short = classes_short_of_shots(config.shots, run.dataset.train.labels, run.partition)
    warn_of_setup(run, trained.federation, short)
    summary = run_summary(run, trained.federation, chosen, short)
    resumed_after = resume.next_round if resume is not None else None
    timing = run_timing(started, resumed_after, account, record.memory)
    if write:
        _write_run_folder(run, run_dir, record, summary, timing, chosen, keeper)
    per_client = chosen.evaluation[0]
    if tracker is not None:
        tracker.log_final(summary, per_client, timing)
        if write:
            tracker.log_run_folder(run_dir)
    return RunResult(config, summary, per_client, run_dir if write else None, trained.federation, timing)


def _round_keeper(run: PreparedRun, run_dir: Path, checkpointing: bool, tracker) -> RoundKeeper:
    """The run's round checkpoints: none unless asked for on an engine that keeps them, and
    none with a shared optimizer, whose momentum a round checkpoint does not hold (a resumed
    run would differ). Before any round, the space the checkpoint will take is checked."""
    config = run.config
    every = config.checkpoint_every if checkpointing and config.optimizer_state == "per_client" else 0
    keeper = RoundKeeper(run_dir, every, run.partition.hash, resolved_config(config).to_dict(), [], tracker)
    if every > 0:
        clients_bytes = 2 * len(run.partition.clients) * state_bytes(run.method.client_state())
        check_output_location(Path(config.out), RUN_FOLDER_BYTES + clients_bytes)
    return keeper


def _score_final_round(record: RunRecord, trained: Trained, final_round: int) -> EvaluatedRound:
    """Score the final round as the engine left it (here, or its clients' scores), then the
    round the run reports (`select_round`)."""
    record.finetune_losses(final_round, trained.finetune_losses)
    if trained.scores is not None:  # scored where the states are (Flower's nodes)
        record.scores(final_round, trained.scores)
    else:
        record.states(final_round, trained.states)
    return record.selection.chosen


def _write_run_folder(
    run: PreparedRun, run_dir: Path, record: RunRecord, summary: dict, timing: dict, chosen, keeper: RoundKeeper
) -> None:
    partition, dataset = run.partition, run.dataset
    manifest = {
        "hash": partition.hash,
        **partition.manifest(),
        **({"validation": run.validation} if run.validation else {}),
    }
    counts = partition_table(partition, dataset.train.labels, dataset.class_names)
    # The scored clients' states, so `fedbench evaluate` can score them again (none: Flower
    # keeps them on its clients; nothing trains: the method's initial state, rebuilt from the seed).
    scored = chosen.states
    extra = (lambda folder: save_clients(folder / "clients.pt", scored)) if scored and run.method.trains else None
    write_run(run_dir, run.config, record.rows, summary, manifest, timing, counts, extra)
    if not run.config.keep_checkpoints:
        keeper.checkpointer.remove()
