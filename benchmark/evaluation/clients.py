"""The evaluation of a federation's clients: each client's personalized model under the
protocol's metrics, at the rounds a run evaluates. The runner, the Flower apps and the
scripts call these; the metrics themselves are the protocol's (benchmark.evaluation.protocols)."""

from __future__ import annotations

import math

from benchmark.evaluation.accuracy import Evaluator
from benchmark.progress import progress_bar
from data.base import DatasetSplits
from data.partition import Partition


def evaluation_rounds(rounds: int, every: int) -> frozenset[int]:
    """The rounds evaluated: every `every`-th and the last; `every` 0 = about 5 points per run."""
    every = every or max(1, math.ceil(rounds / 5))
    return frozenset([*range(every, rounds + 1, every), rounds])


def evaluate_clients(
    evaluator: Evaluator,
    protocol,
    dataset: DatasetSplits,
    partition: Partition,
    client_states,
    progress: bool = True,
) -> tuple[dict[int, dict[str, float]], dict[str, float]]:
    """Every client's personalized model under the protocol's metrics, then the summary."""
    if evaluator.scorer is not None:
        # What each client's metrics will ask for, scored for all clients at once first.
        wanted = []
        for client in partition.clients:
            state = client_states[client.client_id]

            def ask(indices, class_ids, state=state) -> float:
                wanted.append((state, list(indices), list(class_ids)))
                return 50.0  # a placeholder: only the questions are kept

            protocol.client_metrics(ask, client, partition, dataset)
        evaluator.score_together(wanted)
    per_client: dict[int, dict[str, float]] = {}
    clients = progress_bar(
        partition.clients, desc="evaluating clients", unit="clients", enabled=progress, nested=True, leave=False
    )
    for client in clients:
        per_client[client.client_id] = evaluate_client(
            evaluator, protocol, dataset, partition, client, client_states[client.client_id]
        )
    return per_client, protocol.summarize(per_client, partition)


def evaluate_client(evaluator: Evaluator, protocol, dataset: DatasetSplits, partition: Partition, client, state):
    """One client's personalized model (`state`) under the protocol's client metrics (a
    Flower ClientApp calls this on the client's own node)."""
    return protocol.client_metrics(evaluator.load(state), client, partition, dataset)
