"""The evaluation of a federation's clients: each client's personalized model under the
protocol's metrics, at the rounds a run evaluates. The runner, the Flower apps and the
scripts call these; the metrics themselves are the protocol's (benchmark.evaluation.protocols)."""

from __future__ import annotations

import math

from benchmark.evaluation.accuracy import Evaluator
from benchmark.evaluation.metrics import ACCURACY, client_extras, summarize
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
    """Every client's personalized model under the protocol's metrics, then the summary:
    the protocol's requests of every client, scored together first where evaluation is
    batched, then each client's metrics from its scores (with the evaluator's extra metrics,
    `<request>/<metric>`, after them)."""
    requests = {c.client_id: protocol.requests(c, partition, dataset) for c in partition.clients}
    evaluator.score_together([(client_states[cid], wanted) for cid, wanted in requests.items()])
    per_client: dict[int, dict[str, float]] = {}
    clients = progress_bar(
        partition.clients, desc="evaluating clients", unit="clients", enabled=progress, nested=True, leave=False
    )
    for client in clients:
        measured = evaluator.measure(client_states[client.client_id], requests[client.client_id])
        per_client[client.client_id] = client_metrics(protocol, measured, client, partition, dataset)
    return per_client, summarize(protocol, per_client, partition, list(evaluator.extra))


def evaluate_client(evaluator: Evaluator, protocol, dataset: DatasetSplits, partition: Partition, client, state):
    """One client's personalized model (`state`) under the protocol's client metrics (a
    Flower ClientApp calls this on the client's own node)."""
    measured = evaluator.measure(state, protocol.requests(client, partition, dataset))
    return client_metrics(protocol, measured, client, partition, dataset)


def client_metrics(protocol, measured, client, partition: Partition, dataset: DatasetSplits) -> dict[str, float]:
    """The protocol's metrics of a client from its requests' accuracies, then the extra
    metrics of each request (`benchmark.evaluation.metrics`), which the protocol never sees."""
    scores = {name: values[ACCURACY] for name, values in measured.items()}
    return {**protocol.metrics_from(scores, client, partition, dataset), **client_extras(measured)}
