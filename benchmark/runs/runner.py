"""One experiment from a RunConfig to a run folder, its whole flow in one place (what the folder
holds: docs/run-folders.md; the layers around it: docs/architecture.md)."""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import torch

from benchmark import flops, shortcuts
from benchmark.backbone import Backbone, check_weights_reachable, load_backbone
from benchmark.config import ConfigError, RunConfig
from benchmark.errors import RunInterrupted, SetupWarning
from benchmark.evaluation.accuracy import Evaluator
from benchmark.evaluation.client_metrics import evaluate_clients, evaluation_rounds
from benchmark.evaluation.round_selection import RoundSelection, check_round_selection
from benchmark.evaluation.spread import client_spread, states_differ
from benchmark.federation.baselines import CENTRAL_CLIENT, central_schedule, union_client
from benchmark.federation.features import FeatureCache, ViewFeatures
from benchmark.federation.simulator import (
    FederatedSimulator,
    FederationResult,
    FederationSettings,
    client_sampling_schedule,
    describe_sampling,
)
from benchmark.memory import PeakMemory
from benchmark.method import FederatedMethod, State, state_bytes
from benchmark.progress import progress_bar
from benchmark.protocol_registry import get_protocol
from benchmark.registry import build_method, get_method
from benchmark.runs.checkpoints import Checkpointer, RunCheckpoint, kept_on_preemption, resume_note
from benchmark.runs.clients_file import load_clients, save_clients
from benchmark.runs.identity import cell_hash, prepare_data, prepare_weights, resolved_config, run_name
from benchmark.runs.locks import cell_lock
from benchmark.runs.numerics import (
    apply_tf32,
    check_numerics,
    resolved_augment_backend,
    resolved_device,
    resolved_precision,
)
from benchmark.runs.partition_files import partition_table
from benchmark.runs.prechecks import check_device, validate_run
from benchmark.runs.results import (
    ALL_CLIENTS,
    RUN_FOLDER_BYTES,
    MetricRow,
    check_output_location,
    round_mean_losses,
    training_health,
    write_run,
)
from data.attributes import load_class_attributes
from data.base import DatasetSplits
from data.catalog import dataset_info, resolve_data_root
from data.combined import load_datasets
from data.decoded import DeviceImages
from data.fewshot import images_per_class
from data.partition import Partition
from data.transforms import clip_transforms
from data.validation import validation_view

# Frozen features survive across runs in one process (a sweep, the demo): same backbone,
# same split, same transform -> same features.
SHARED_FEATURES = FeatureCache()
# And the frozen features of augmented training views: the same views for every method of a cell's seed.
SHARED_VIEWS = ViewFeatures()


@dataclass
class RunResult:
    config: RunConfig
    summary: dict[str, Any]
    per_client: dict[int, dict[str, float]]
    run_dir: Path | None
    federation: FederationResult
    timing: dict[str, Any]  # wall_seconds, resumed_after_round (timing.json)


def resolve_device(config: RunConfig) -> tuple[str, str]:
    """(torch device, Lightning precision) for the config's `device` and `precision`."""
    device = resolved_device(config.device)
    # auto: the method says what it needs on a GPU (FederatedMethod.gpu_precision); the cell's
    # identity records the same resolution (benchmark.runs.numerics)
    precision = resolved_precision(config.method, device, config.precision)
    if precision == "auto":
        get_method(config.method)  # not installed here: its MethodError names the fix
    if precision == "16-mixed" and not device.startswith("cuda"):
        # Lightning would train in bf16 instead, while evaluation (autocast_context) ran in fp16.
        raise ConfigError(
            f"precision 16-mixed needs a CUDA device (device is {device!r}); on CPU use bf16-mixed or 32-true"
        )
    return device, precision


def autocast_context(device: str, precision: str) -> contextlib.AbstractContextManager:
    """The autocast Lightning's training step runs under for `precision`, entered around the
    run's other forward passes (frozen features, evaluation): a model is evaluated with the
    numerics it was trained with."""
    if precision == "32-true":
        return contextlib.nullcontext()
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[precision]
    return torch.autocast("cuda" if device.startswith("cuda") else "cpu", dtype=dtype, cache_enabled=False)


def load_run_dataset(config: RunConfig, backbone: Backbone) -> DatasetSplits:
    for name in config.datasets:
        if dataset_info(name).test_only:  # no train split: training on it would silently train nothing
            raise ConfigError(
                f"dataset {name!r} is a test set only (no train split); train on another dataset "
                "(e.g. imagenet) and test on it under a protocol that tests on other datasets (`fedbench run --help`)."
            )
    transforms = clip_transforms(backbone.image_size, backbone.image_mean, backbone.image_std, config.augment)
    return load_datasets(config.datasets, resolve_data_root(config.data_root), transforms, config.test_datasets)


def classes_short_of_shots(shots: int, train_labels, partition: Partition) -> dict[int, int]:
    """{class: its training images} for the classes the clients train on that hold fewer
    images than `shots` (a few-shot sample takes such a class whole); empty for shots 0."""
    if shots <= 0:
        return {}
    trained = {train_labels[i] for client in partition.clients for i in client.train_indices}
    return {c: n for c, n in images_per_class(train_labels, trained).items() if n < shots}


def build_seeded_method(config: RunConfig, backbone: Backbone) -> FederatedMethod:
    # Initialization depends on the run seed and nothing else.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return build_method(config.method, backbone, config.method_args)


def run_experiment(
    config: RunConfig, write: bool = True, progress: bool = True, tracker=None, engine: "FederationEngine | None" = None
) -> RunResult:
    """Run `config` end to end; write its run folder under `config.out` when `write`,
    holding the cell's lock throughout (another process on the same cell: CellBusy).
    `engine` None: the in-process simulator; otherwise another engine that runs the
    federation (`benchmark.runs.flower`), everything else (rows, summary, run folder) as here."""
    if engine is not None and (config.federation != "fedavg" or config.finetune_epochs or config.evaluate_from):
        raise ConfigError(
            "federation local / central, --finetune-epochs and evaluating a saved run run in process only "
            "(the clients' states stay on Flower's clients): use `fedbench run` / `fedbench evaluate`"
        )
    if engine is not None and (config.optimizer_state != "per_client" or config.select_round != "final"):
        raise ConfigError(
            "optimizer_state = shared and select_round = best_local_test (the authors' rules) run in process only: "
            "Flower's clients keep no optimizer between rounds and the server does not keep every round's "
            "states; use `fedbench run`"
        )
    with shortcuts.use(config.shortcuts):  # the exact shortcuts, or the plain path (--no-shortcuts)
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
                stop.notes.append(resume_note(run_dir, config.checkpoint_every if engine is None else 0))
                raise


PerClient = dict[int, dict[str, float]]


class FederationEngine(Protocol):
    """Runs a prepared federation elsewhere (Flower): the rounds of `run.schedule`, calling
    `on_round_end(RoundLog)` after each and `on_evaluate(round, per_client metrics)` after
    each round of `eval_rounds` but the last, where the clients' states live. Returns the
    federation (its `client_states` may be empty: they stay with the clients) and every
    client's metrics after the last round. No round checkpoints: it runs from round 1."""

    def __call__(
        self,
        run: "PreparedRun",
        on_round_end: Callable,
        on_evaluate: Callable[[int, PerClient], Any],
        eval_rounds: frozenset[int],
    ) -> tuple[FederationResult, PerClient]: ...


@dataclass
class PreparedRun:
    """Everything a run builds from its config before the first round: the seeded method,
    the data, the partition and the schedule. `fedbench run` and the Flower apps (server
    and every client) build it with the same function, so both engines start equal."""

    config: RunConfig
    protocol: Any
    device: str
    precision: str
    method: FederatedMethod
    dataset: DatasetSplits
    validation: dict[str, Any] | None  # the validation split's manifest (eval_split = val)
    partition: Partition
    schedule: list[list[int]]
    train_inputs: Any  # the training split, or its cached frozen features
    cache_train: bool
    settings: FederationSettings
    attributes: Any
    augment_backend: str = "pil"  # who augments the training images (benchmark.runs.numerics)

    def simulator(self, progress: bool = False, federation: str | None = None, **hooks) -> FederatedSimulator:
        """The federation of the run's `federation` option (or of `federation`): the method's
        (fedavg), every client alone (local), or one client on the union of their data
        (central; its client 0)."""
        federation = federation or self.config.federation
        clients, schedule, epoch_steps = self.partition.clients, self.schedule, None
        if federation == "central":
            schedule, epoch_steps = central_schedule(schedule, clients, self.config.batch_size)
            clients = (union_client(clients),)
        return FederatedSimulator(
            self.method,
            self.train_inputs,
            self.dataset.train.labels,
            self.dataset.class_names,
            clients,
            schedule,
            self.config.seed,
            self.settings,
            progress=progress,
            federation=federation,
            epoch_steps=epoch_steps,
            view_features=SHARED_VIEWS,
            **hooks,
        )

    def finetuner(self) -> FederatedSimulator:
        """The run's clients, each on its own data (`--finetune-epochs`, after the last round)."""
        return self.simulator(federation="local")

    def scored_states(self, states: dict[int, State]) -> dict[int, State]:
        """The states of the simulator's clients as the partition's clients are scored:
        the same under fedavg and local; central: its one state for every client."""
        if self.config.federation != "central":
            return states
        return {c.client_id: states[CENTRAL_CLIENT] for c in self.partition.clients}

    def evaluator(self) -> Evaluator:
        """One evaluator for every evaluated round: it memoizes by state, so a client whose
        state did not change (or a global method's shared state) is scored once."""
        return Evaluator(
            self.method,
            self.dataset.test,
            SHARED_FEATURES,
            self.config.eval_batch_size,
            self.config.num_workers,
            batched=self.config.batched_evaluation,
        )


def prepare_run(config: RunConfig, progress: bool = True, train_features: bool = True) -> PreparedRun:
    """Build `config`'s method, data, partition and schedule (under `shortcuts.use(config.shortcuts)`,
    as the caller runs everything); `train_features` False skips caching the training
    images' frozen features (a Flower server trains nothing)."""
    SHARED_FEATURES.progress = progress
    validate_run(config)  # before any backbone is built or pretrained
    protocol = get_protocol(config.protocol)
    protocol.check(config)
    check_device(config.device)  # on the machine that runs it: a sweep's planner may have no GPU
    check_weights_reachable(config.backbone, config.pretrained)  # offline: fail now, not after minutes of retries
    device, precision = resolve_device(config)
    check_numerics(config)
    apply_tf32(device, config.tf32)  # off unless asked: PyTorch's default allows it in convolutions
    backbone = load_backbone(config.backbone, config.pretrained, device)
    method = build_seeded_method(config, backbone)  # validates --method before data loads
    if method.uses_class_attributes and (len(config.datasets) > 1 or config.test_datasets):
        # One attribute file (and one set of sentence frames) per run: a federation over
        # several datasets would need one of each per dataset, which the hook does not take yet.
        raise ConfigError(
            f"{config.method} reads one dataset's class attribute file; it cannot run over several datasets "
            f"yet (dataset = {config.dataset!r}, test datasets = {'+'.join(config.test_datasets)!r}). "
            "Run it on one dataset."
        )
    dataset = load_run_dataset(config, backbone)
    validation = None
    if config.eval_split == "val":  # tuning: `test` becomes the validation split, the test split is dropped
        dataset, validation = validation_view(dataset)
    partition = protocol.partition(dataset, config)
    # The partition fixes the client count (class-chunk protocols derive it from the classes).
    schedule = client_sampling_schedule(
        len(partition.clients), config.participation, config.rounds, config.seed, config.client_sampling
    )
    method.to(device)

    # Without augmentation the training inputs are deterministic, so frozen-feature
    # methods train on cached features: exact, and the image tower runs once per image.
    cache_train = method.frozen_image_features and not config.augment
    train_inputs = dataset.train
    if cache_train and train_features:
        needed = sorted({i for c in partition.clients for i in c.train_indices})
        with autocast_context(device, precision):
            train_inputs = SHARED_FEATURES.features(method, dataset.train, needed)

    augment_backend = resolved_augment_backend(config, device)
    if augment_backend == "device" and train_features and not cache_train:
        # decoded once (cached on disk) and kept on the device; augmented there a batch at a time
        needed = sorted({i for c in partition.clients for i in c.train_indices})
        train_inputs = DeviceImages(
            dataset.train, needed, device, backbone.image_size, backbone.image_mean, backbone.image_std
        )

    accelerator = "gpu" if device.startswith("cuda") else "cpu"
    settings = FederationSettings(
        accelerator,
        precision,
        config.num_workers,
        config.batch_size,
        config.local_epochs,
        config.aggregation,
        config.batched_training,
        config.optimizer_state,
    )
    attributes = None
    if method.uses_class_attributes:
        attributes = load_class_attributes(
            config.dataset, dataset.class_names, resolve_data_root(config.data_root), config.attributes
        )
        method.set_class_attributes(attributes)
    return PreparedRun(
        config,
        protocol,
        device,
        precision,
        method,
        dataset,
        validation,
        partition,
        schedule,
        train_inputs,
        cache_train,
        settings,
        attributes,
        augment_backend,
    )


def _run_experiment(
    config: RunConfig, write: bool, progress: bool, tracker, engine: FederationEngine | None
) -> RunResult:
    with flops.ledger() as account:  # the FLOPs this process executes for the run (timing.json)
        return _train_and_evaluate(config, write, progress, tracker, engine, account)


def _train_and_evaluate(
    config: RunConfig, write: bool, progress: bool, tracker, engine: FederationEngine | None, account: flops.FlopLedger
) -> RunResult:
    started = time.perf_counter()
    run = prepare_run(config, progress, train_features=engine is None and not config.evaluate_from)
    if tracker is not None and hasattr(tracker, "start"):
        tracker.start()  # a deferred W&B run starts now, with the run built: never for a refused one
    protocol, device, precision, method = run.protocol, run.device, run.precision, run.method
    dataset, partition, validation, attributes = run.dataset, run.partition, run.validation, run.attributes
    rows: list[MetricRow] = []
    check_round_selection(config, protocol.metrics)

    run_dir = Path(config.out) / run_name(config)
    # A shared optimizer's momentum is not in a round checkpoint: a resumed run would differ.
    checkpointing = write and engine is None and config.optimizer_state == "per_client"
    checkpointer = Checkpointer(
        run_dir,
        config.checkpoint_every if checkpointing else 0,
        partition.hash,
        resolved_config(config).to_dict(),
    )
    resume = checkpointer.load() if write else None
    if resume is not None:
        rows.extend(resume.rows)
        if progress:
            print(f"resuming {run_dir.name} after round {resume.federation.next_round} from its round checkpoint")
    if write and checkpointer.every > 0:  # the space the checkpoint will take, before any round
        check_output_location(
            Path(config.out), RUN_FOLDER_BYTES + 2 * len(partition.clients) * state_bytes(method.client_state())
        )

    last_round: list[RunCheckpoint] = []  # the latest completed round, saved or not

    def on_snapshot(snapshot) -> None:
        wandb_id = getattr(getattr(tracker, "run", None), "id", None)
        last_round[:] = [RunCheckpoint(snapshot, list(rows), wandb_id, partition.hash)]
        if checkpointer.due(snapshot.next_round):
            checkpointer.save(last_round[0])

    def on_round_end(log) -> None:
        for cid, loss in log.train_loss.items():
            rows.append(MetricRow(log.round, cid, "train_loss", loss))
        for cid, lr in log.lr.items():  # the lr each client-round started at (its schedule's position)
            rows.append(MetricRow(log.round, cid, "lr", lr))
        rows.append(MetricRow(log.round, ALL_CLIENTS, "bytes_up", log.bytes_up))
        rows.append(MetricRow(log.round, ALL_CLIENTS, "bytes_down", log.bytes_down))
        if tracker is not None:
            tracker.log_round(log)

    evaluator = run.evaluator()
    memory = PeakMemory(cuda=device.startswith("cuda"))

    def evaluate_round(round_number: int, client_states):
        with memory.phase("evaluation"), autocast_context(device, precision):  # the training step's autocast
            per_client, _ = evaluate_clients(evaluator, protocol, dataset, partition, client_states, progress)
        return record_evaluation(round_number, per_client)

    def record_evaluation(round_number: int, per_client: PerClient):
        summary_metrics = protocol.summarize(per_client, partition)
        details = protocol.details(per_client, partition)
        for cid, metrics in per_client.items():
            rows.extend(MetricRow(round_number, cid, m, v) for m, v in metrics.items())
        rows.extend(MetricRow(round_number, ALL_CLIENTS, m, v) for m, v in {**summary_metrics, **details}.items())
        if tracker is not None:
            tracker.log_evaluation(round_number, summary_metrics)
        return per_client, summary_metrics, details

    def keep_last_round() -> None:
        # Stopped (preemption, a time limit): keep the last completed round if checkpoints are
        # on, so the rerun loses only the round in progress.
        if last_round and checkpointer.every != 0 and not checkpointer.saved(last_round[0].federation.next_round):
            checkpointer.save(last_round[0])

    selection = RoundSelection(config.select_round)
    # the authors' best round is chosen among every round: each is evaluated
    eval_rounds = evaluation_rounds(config.rounds, 1 if config.select_round != "final" else config.eval_every)
    final_round = config.rounds

    def evaluate_offered(round_number: int, client_states):
        evaluation = evaluate_round(round_number, client_states)
        selection.offer(round_number, client_states, evaluation)
        return evaluation

    scored: dict[int, State] = {}  # the states the final metrics score (saved as clients.pt)
    if config.evaluate_from:  # `fedbench evaluate`: the saved clients of a finished run, no training
        scored = load_clients(Path(config.evaluate_from), partition, method)
        federation = FederationResult(scored)
        per_client, summary_metrics, details = evaluate_round(final_round, scored)
    elif engine is not None:
        # The rounds as `fedbench run` shows them (the engine's own log is quiet: benchmark.runs.flower).
        bar = progress_bar(
            total=len(run.schedule), desc=f"training {config.method}", unit="rounds", enabled=progress, leave=False
        )

        def on_engine_round(log) -> None:
            on_round_end(log)
            bar.set_postfix(loss=f"{np.mean(list(log.train_loss.values())):.3f}")
            bar.update()

        try:
            federation, final_scores = engine(run, on_engine_round, record_evaluation, eval_rounds)
        finally:
            bar.close()
        per_client, summary_metrics, details = record_evaluation(final_round, final_scores)
    else:
        simulator = run.simulator(
            progress,
            on_round_end=on_round_end,
            on_snapshot=on_snapshot if write else None,
            eval_rounds=eval_rounds,
            on_evaluate=lambda number, states: evaluate_offered(number, run.scored_states(states)),
        )
        try:
            with kept_on_preemption(keep_last_round), memory.phase("training"):
                federation = simulator.run(resume.federation if resume is not None else None)
        except RunInterrupted:
            keep_last_round()
            raise
        if config.federation == "central":  # its one client trained for all of them
            federation.rounds_trained = {
                c.client_id: federation.rounds_trained[CENTRAL_CLIENT] for c in partition.clients
            }
        scored = run.scored_states(federation.client_states)
        if config.finetune_epochs:  # the federation's last round stays as it is; the scored states move
            with memory.phase("training"):
                scored, losses = run.finetuner().finetune(scored, config.finetune_epochs)
            rows.extend(MetricRow(final_round, cid, "finetune_loss", loss) for cid, loss in losses.items())
        evaluate_offered(final_round, scored)
        chosen = selection.chosen
        scored, (per_client, summary_metrics, details) = chosen.states, chosen.evaluation
    # 0 flags a client that never trained: evaluated with the final download alone.
    rows.extend(MetricRow(final_round, cid, "rounds_trained", n) for cid, n in federation.rounds_trained.items())
    if federation.never_trained:
        warnings.warn(
            f"{len(federation.never_trained)} of {len(partition.clients)} clients never trained under client_sampling="
            f"{config.client_sampling}, participation {config.participation}, {config.rounds} rounds "
            f"(clients {federation.never_trained[:10]}{' ...' if len(federation.never_trained) > 10 else ''}); "
            "they are evaluated with the final download and flagged rounds_trained = 0 in metrics.csv"
        )

    short = classes_short_of_shots(config.shots, dataset.train.labels, partition)
    if short:
        warnings.warn(
            f"{len(short)} trained classes have fewer than {config.shots} training images (the fewest: "
            f"{min(short.values())}): they train on all they have, so this {config.shots}-shot run is not one "
            "of equal shots per class (`few_shot` in summary.json)",
            SetupWarning,
        )
    counts = method.parameter_counts()
    if config.federation != "fedavg":  # local, central: nothing leaves a client
        counts["uploaded_params"] = 0
    rounds = federation.rounds
    summary = {
        "method": config.method,
        "dataset": config.dataset,
        "protocol": config.protocol,
        "shots": config.shots,
        "seed": config.seed,
        # present only when data fall short: the summaries of runs with enough images stay as they were
        **({"few_shot": {"classes_short": len(short), "fewest_images": min(short.values())}} if short else {}),
        "config_hash": cell_hash(config),
        "round": final_round if selection.chosen is None else selection.chosen.round,
        **({"select_round": config.select_round} if config.select_round != "final" else {}),
        "eval_split": config.eval_split,
        "metrics": summary_metrics,
        **({"details": details} if details else {}),
        # spread of every metric when the scored models are the clients' own (states_differ)
        **({"spread": spread} if (spread := client_spread(per_client, states_differ(scored))) else {}),
        **({"evaluated_from": Path(config.evaluate_from).name} if config.evaluate_from else {}),
        "clients": len(partition.clients),
        **counts,
        "client_sampling": describe_sampling(config.client_sampling, len(partition.clients), config.participation),
        "clients_never_trained": federation.never_trained,
        "bytes_up_per_round": [r.bytes_up for r in rounds],
        "bytes_down_per_round": [r.bytes_down for r in rounds],
        "bytes_up_total": sum(r.bytes_up for r in rounds),
        "bytes_down_total": sum(r.bytes_down for r in rounds) + federation.final_download_bytes,
        "partition_hash": partition.hash,
        "train_features_cached": run.cache_train,
        **({"attributes_file": attributes.source, "attributes_sha256": attributes.sha256} if attributes else {}),
        "device": device,
        # `--tf32` said with the precision: a table's numerics note keeps TF32 cells apart
        "precision": f"{precision} (tf32)" if config.tf32 and device.startswith("cuda") else precision,
        **({"augment_backend": run.augment_backend} if config.augment else {}),
        # the loss half of the unstable flag (the zero-shot half is the table's: benchmark.sweeps.tables)
        "health": training_health(round_mean_losses({r.round: r.train_loss for r in rounds})),
    }
    # Apart from summary.json (which a resumed run reproduces byte for byte, and another engine
    # equals): how long it took and the FLOPs this process executed for it -- they depend on
    # what it had cached before (shared features, memoized scores), on the rounds a resumed
    # run redid, and on the engine (Flower's clients train elsewhere: nothing counted here).
    timing = {
        "wall_seconds": round(time.perf_counter() - started, 3),
        "resumed_after_round": resume.federation.next_round if resume is not None else None,
        "flops": {**account.summary(), "train_steps": account.steps, "train_steps_counted": account.steps_counted},
        # peak memory per phase: like time, it depends on the machine and on what was cached before
        "memory": memory.report(),
    }
    if write:
        manifest = {
            "hash": partition.hash,
            **partition.manifest(),
            **({"validation": validation} if validation else {}),
        }
        counts = partition_table(partition, dataset.train.labels, dataset.class_names)
        # The scored clients' states, so `fedbench evaluate` can score them again (none: Flower
        # keeps them on its clients; nothing trains: the method's initial state, rebuilt from the seed).
        extra = (lambda folder: save_clients(folder / "clients.pt", scored)) if scored and method.trains else None
        write_run(run_dir, config, rows, summary, manifest, timing, counts, extra)
        if not config.keep_checkpoints:
            checkpointer.remove()
    if tracker is not None:
        tracker.log_final(summary, per_client, timing)
        if write and run_dir is not None:
            tracker.log_run_folder(run_dir)
    return RunResult(config, summary, per_client, run_dir if write else None, federation, timing)
