"""The rows around a federated method: `local` (every client trains alone) and `central`
(one client holding the union of the clients' training data), run by the same simulator,
client loop and evaluation as the federation they bound (`RunConfig.federation`).

- local: each client trains in the rounds the schedule gives it, for the same local
  epochs, with the same seeds, as under the federation; nothing is uploaded, aggregated
  or downloaded (`SoloServer`), so each client's model is what its own data makes of the
  initial state. It equals a one-client federation of that client (`tests/federation/test_baselines.py`).
- central: one client (id 0) whose training data is the union of the clients'
  (`union_client`) trains in every round for as many optimizer steps as the round's
  sampled clients took together (`central_schedule`), its batches drawn from consecutive
  shuffled passes over the union (`simulator.StreamBatches`). Its one state is then scored on
  every client's test data, as the protocol scores each client.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from benchmark.federation.server import Server
from benchmark.method import State
from data.partition import ClientShard

CENTRAL_CLIENT = 0  # the id of the one client of a central run


class SoloServer(Server):
    """The server of a run without federation: it receives nothing and sends nothing; it
    only counts the rounds each client trained in (the run's `rounds_trained`)."""

    def download(self, cid: int, round_index: int) -> State | None:
        return None

    def receive(self, round_index: int, uploads: Iterable[tuple[int, State]]) -> State:
        for cid, _ in uploads:
            self.rounds_trained[cid] += 1
        return {}

    def evaluation_download(self, cid: int) -> State | None:
        return None  # every client is scored with what its own training left


def union_client(clients: Sequence[ClientShard]) -> ClientShard:
    """One client holding every client's training images; its label space is the union of
    theirs (base2novel: the base classes), so it is trained over all of them at once."""
    indices = tuple(i for c in clients for i in c.train_indices)
    classes = tuple(sorted({k for c in clients for k in c.class_ids}))
    spaces = tuple(sorted({k for c in clients for k in c.train_classes}))
    return ClientShard(CENTRAL_CLIENT, indices, classes, label_space=spaces if spaces != classes else None)


def steps_per_epoch(num_samples: int, batch_size: int) -> int:
    """The optimizer steps of one local epoch of a client with `num_samples` images
    (`simulator.ClientBatches`' length: full batches, the last one partial)."""
    return math.ceil(num_samples / batch_size)


def central_schedule(
    schedule: Sequence[Sequence[int]], clients: Sequence[ClientShard], batch_size: int
) -> tuple[list[list[int]], list[int]]:
    """The central run's schedule (its one client in every round) and, per round, the
    steps of one of its local epochs: the sum of the round's sampled clients' steps, so
    that the central client takes as many optimizer steps as the federation does."""
    sizes = {c.client_id: c.num_samples for c in clients}
    budgets = [sum(steps_per_epoch(sizes[cid], batch_size) for cid in sampled) for sampled in schedule]
    return [[CENTRAL_CLIENT] for _ in schedule], budgets
