"""`federation: central`, one client holding the union of the clients' training data: it
(id 0, `union_client`) trains in every round for as many optimizer steps as the round's
sampled clients took together (`central_schedule`), its batches drawn from consecutive
shuffled passes over the union (`simulator.StreamBatches`). Nothing is sent, as under
`local`; its one state is then scored on every client's test data, as the protocol scores
each client, and every client counts its rounds.

Its learning rate is the tuned one times `central_lr_factor` (the mean steps a sampled
client takes in a round over the steps the central client takes): the federation's round
moves its state once, by the average of its clients' updates, while the central client
makes the round's steps one after another. With one local step per client and SGD, the
federation's round is one step of the tuned lr on the mean gradient of the clients'
batches; the central client's K steps of lr / K over the same images are that step cut in
K sequential pieces (the linear scaling rule, Goyal et al. 2017, read backwards: K times
smaller batches, K times smaller steps). Under Adam, whose step is about the lr whatever
the gradient's scale, K steps at the tuned lr would go up to K times as far as the round
it stands for. So the central row is the federation's step length on the union's data,
not a K times longer walk at a rate tuned for one step (docs/reading-a-row.md)."""

from __future__ import annotations

from typing import Sequence

from benchmark.federation.loading import steps_per_epoch
from benchmark.federation.server import FederationPlan
from benchmark.federation.servers.local import LocalServer
from benchmark.method import FederatedMethod, State
from data.partition import ClientShard

CENTRAL_CLIENT = 0  # the id of the one client of a central run


class CentralServer(LocalServer):
    """The server of the union client: `LocalServer`'s rules (nothing is sent) over the
    central plan; the partition's clients are scored with, and counted as, its one client."""

    name = "central"

    @classmethod
    def plan(cls, clients: Sequence[ClientShard], schedule: list[list[int]], batch_size: int) -> FederationPlan:
        central, epoch_steps = central_schedule(schedule, clients, batch_size)
        return FederationPlan((union_client(clients),), central, epoch_steps)

    @classmethod
    def lr_factor(cls, clients: Sequence[ClientShard], schedule: list[list[int]], batch_size: int) -> float:
        return central_lr_factor(schedule, clients, batch_size)

    @classmethod
    def scored_states(cls, states: dict[int, State], clients: Sequence[ClientShard]) -> dict[int, State]:
        return {c.client_id: states[CENTRAL_CLIENT] for c in clients}

    @classmethod
    def rounds_trained_of(cls, counted: dict[int, int], clients: Sequence[ClientShard]) -> dict[int, int]:
        if CENTRAL_CLIENT not in counted:  # nothing trains: nothing counted
            return counted
        return {c.client_id: counted[CENTRAL_CLIENT] for c in clients}  # its one client trained for all of them

    @classmethod
    def scores_one_state(cls, method: FederatedMethod) -> bool:
        return True  # its one client's

    @classmethod
    def holder(cls, cid: int) -> int:
        return CENTRAL_CLIENT


def union_client(clients: Sequence[ClientShard]) -> ClientShard:
    """One client holding every client's training images; its label space is the union of
    theirs (base2novel: the base classes), so it is trained over all of them at once."""
    indices = tuple(i for c in clients for i in c.train_indices)
    classes = tuple(sorted({k for c in clients for k in c.class_ids}))
    spaces = tuple(sorted({k for c in clients for k in c.train_classes}))
    return ClientShard(CENTRAL_CLIENT, indices, classes, label_space=spaces if spaces != classes else None)


def central_schedule(
    schedule: Sequence[Sequence[int]], clients: Sequence[ClientShard], batch_size: int
) -> tuple[list[list[int]], list[int]]:
    """The central run's schedule (its one client in every round) and, per round, the
    steps of one of its local epochs: the sum of the round's sampled clients' steps, so
    that the central client takes as many optimizer steps as the federation does."""
    sizes = {c.client_id: c.num_samples for c in clients}
    budgets = [sum(steps_per_epoch(sizes[cid], batch_size) for cid in sampled) for sampled in schedule]
    return [[CENTRAL_CLIENT] for _ in schedule], budgets


def central_lr_factor(schedule: Sequence[Sequence[int]], clients: Sequence[ClientShard], batch_size: int) -> float:
    """The factor on the tuned learning rate of a central run (module doc): the mean optimizer
    steps of a sampled client's local epoch over the mean steps of the central client's,
    both over the schedule (1 where one client holds everything)."""
    sizes = {c.client_id: c.num_samples for c in clients}
    client_steps = [steps_per_epoch(sizes[cid], batch_size) for sampled in schedule for cid in sampled]
    _, central_steps = central_schedule(schedule, clients, batch_size)
    if not client_steps or not sum(central_steps):
        return 1.0
    return (sum(client_steps) / len(client_steps)) / (sum(central_steps) / len(central_steps))
