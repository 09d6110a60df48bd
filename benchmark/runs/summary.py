"""What a run's summary.json and timing.json say, from what its engine and its evaluations left
(docs/run-folders.md), and the warnings a reader of them needs."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from benchmark import flops
from benchmark.errors import SetupWarning
from benchmark.evaluation.metrics import extra_metrics, protocol_metrics
from benchmark.evaluation.round_selection import EvaluatedRound
from benchmark.evaluation.spread import client_spread, states_differ
from benchmark.federation.round_loop import FederationResult
from benchmark.federation.simulator import describe_sampling
from benchmark.memory import PeakMemory
from benchmark.runs.identity import cell_hash
from benchmark.runs.preparation import PreparedRun
from benchmark.runs.results import round_mean_losses, training_health
from data.fewshot import images_per_class
from data.partition import Partition


def classes_short_of_shots(shots: int, train_labels, partition: Partition) -> dict[int, int]:
    """{class: its training images} for the classes the clients train on that hold fewer
    images than `shots` (a few-shot sample takes such a class whole); empty for shots 0."""
    if shots <= 0:
        return {}
    trained = {train_labels[i] for client in partition.clients for i in client.train_indices}
    return {c: n for c, n in images_per_class(train_labels, trained).items() if n < shots}


def warn_of_setup(run: PreparedRun, federation: FederationResult, short: dict[int, int]) -> None:
    """Warn of clients that never trained and of classes short of the run's shots."""
    config, never = run.config, federation.never_trained
    if never:
        warnings.warn(
            f"{len(never)} of {len(run.partition.clients)} clients never trained under client_sampling="
            f"{config.client_sampling}, participation {config.participation}, {config.rounds} rounds "
            f"(clients {never[:10]}{' ...' if len(never) > 10 else ''}); "
            "they are evaluated with the final download and flagged rounds_trained = 0 in metrics.csv"
        )
    if short:
        warnings.warn(
            f"{len(short)} trained classes have fewer than {config.shots} training images (the fewest: "
            f"{min(short.values())}): they train on all they have, so this {config.shots}-shot run is not one "
            "of equal shots per class (`few_shot` in summary.json)",
            SetupWarning,
        )


def run_summary(
    run: PreparedRun, federation: FederationResult, chosen: EvaluatedRound, short: dict[int, int]
) -> dict[str, Any]:
    """summary.json: the run, its reported round's metrics, and what the federation moved."""
    config, partition, attributes = run.config, run.partition, run.attributes
    per_client, summary_metrics, details = chosen.evaluation
    plain = protocol_metrics(per_client, list(extra_metrics(config.metrics)))
    rounds = federation.rounds
    return {
        "method": config.method,
        "dataset": config.dataset,
        "protocol": config.protocol,
        "shots": config.shots,
        "seed": config.seed,
        # present only when data fall short: the summaries of runs with enough images stay as they were
        **({"few_shot": {"classes_short": len(short), "fewest_images": min(short.values())}} if short else {}),
        "config_hash": cell_hash(config),
        "round": chosen.round,
        **({"select_round": config.select_round} if config.select_round != "final" else {}),
        "eval_split": config.eval_split,
        "metrics": summary_metrics,
        **({"details": details} if details else {}),
        # spread of every protocol metric when the scored models are the clients' own (states_differ);
        # not of `--metrics`' extras, whose worst need not be their lowest (a calibration error)
        **({"spread": spread} if (spread := client_spread(plain, states_differ(chosen.states))) else {}),
        **({"evaluated_from": Path(config.evaluate_from).name} if config.evaluate_from else {}),
        "clients": len(partition.clients),
        **run.server.parameter_counts(run.method),
        "client_sampling": describe_sampling(config.client_sampling, len(partition.clients), config.participation),
        "clients_never_trained": federation.never_trained,
        "bytes_up_per_round": [r.bytes_up for r in rounds],
        "bytes_down_per_round": [r.bytes_down for r in rounds],
        "bytes_up_total": sum(r.bytes_up for r in rounds),
        "bytes_down_total": sum(r.bytes_down for r in rounds) + federation.final_download_bytes,
        "partition_hash": partition.hash,
        "train_features_cached": run.cache_train,
        **({"attributes_file": attributes.source, "attributes_sha256": attributes.sha256} if attributes else {}),
        "device": run.device,
        # `--tf32` said with the precision: a table's numerics note keeps TF32 cells apart
        "precision": f"{run.precision} (tf32)" if config.tf32 and run.device.startswith("cuda") else run.precision,
        **({"augment_backend": run.augment_backend} if config.augment else {}),
        # the loss half of the unstable flag (the zero-shot half is the table's: benchmark.sweeps.table_stats)
        "health": training_health(round_mean_losses({r.round: r.train_loss for r in rounds})),
    }


def run_timing(started: float, resumed_after: int | None, account: flops.FlopLedger, memory: PeakMemory) -> dict:
    """timing.json. Apart from summary.json (which a resumed run reproduces byte for byte, and
    another engine equals): how long it took and the FLOPs this process executed for it -- they
    depend on what it had cached before (shared features, memoized scores), on the rounds a
    resumed run redid, and on the engine (Flower's clients train elsewhere: nothing counted here)."""
    return {
        "wall_seconds": round(time.perf_counter() - started, 3),
        "resumed_after_round": resumed_after,
        "flops": {**account.summary(), "train_steps": account.steps, "train_steps_counted": account.steps_counted},
        # peak memory per phase: like time, it depends on the machine and on what was cached before
        "memory": memory.report(),
    }
