"""The federation's server: the one place its rules are written (the Strategy pattern, as
Flower's `Strategy` is the one object every Flower runtime calls).

`Server` holds what the server keeps between rounds -- the last aggregate, the bank of
each client's latest upload, how many rounds each client trained in -- and applies the
method's rules to it:

- `download(cid, round_index)`: what a sampled client receives before it trains (nothing
  in the first round);
- `receive(round_index, uploads)`: the round's uploads weighted per the run's
  `aggregation`, aggregated by the method in client-id order (the sum is order-sensitive),
  the aggregate checked finite, the bank updated;
- `evaluation_download(cid)`: the download a client is evaluated with, or None when it is
  evaluated with the state its own training left.

It is also the federation's kind (`RunConfig.federation`): what trains in which round
(`plan`), what a client uploads (`upload_of`), and how the trained clients' states and
round counts become the partition's clients' (`scored_states`, `rounds_trained_of`,
`holder`). `Server`'s own answers are the method's federation's; the kinds, one file each,
are in `benchmark.federation.servers` (`FedAvgServer`, `LocalServer`, `CentralServer`).

The in-process simulator (`benchmark.federation.simulator`), Flower's `MethodStrategy`
(`benchmark.runs.flower`) and the bare loop `fedbench bench` measures
(`benchmark.federation.bare_loop`) all call one of these; none of them writes a rule again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from benchmark.errors import DivergenceError
from benchmark.method import ClientUpdate, FederatedMethod, State
from data.partition import ClientShard


@dataclass(frozen=True)
class FederationPlan:
    """What trains: the clients (their shards), the clients of every round, and, where a
    round's local epoch is not one pass over a client's data, its optimizer steps per round."""

    clients: tuple[ClientShard, ...]
    schedule: list[list[int]]
    epoch_steps: list[int] | None = None  # None: one pass per local epoch


class Server:
    """The server of one federation of `method` over `clients`; `aggregation` is the run's
    client weighting: "samples" (FedAvg's n_i) or "uniform" (1 each)."""

    name: str  # the `federation` run option that names its kind (benchmark.federation.servers)

    @classmethod
    def plan(cls, clients: Sequence[ClientShard], schedule: list[list[int]], batch_size: int) -> FederationPlan:
        """The federation's plan from the partition's `clients` and the sampled `schedule`:
        the clients train in the rounds the schedule samples them, one pass per local epoch."""
        return FederationPlan(tuple(clients), schedule)

    @classmethod
    def lr_factor(cls, clients: Sequence[ClientShard], schedule: list[list[int]], batch_size: int) -> float:
        """The factor on the method's tuned learning rate under this federation: 1 where every
        trained client takes the steps a client of the method's federation takes (fedavg,
        local); the central run's is `servers.central.central_lr_factor`."""
        return 1.0

    @classmethod
    def scored_states(cls, states: dict[int, State], clients: Sequence[ClientShard]) -> dict[int, State]:
        """The trained clients' `states` as the partition's `clients` are scored: each its own."""
        return states

    @classmethod
    def rounds_trained_of(cls, counted: dict[int, int], clients: Sequence[ClientShard]) -> dict[int, int]:
        """The rounds each of the partition's `clients` trained in, from the server's count."""
        return counted

    @classmethod
    def parameter_counts(cls, method: FederatedMethod) -> dict[str, int]:
        """The method's parameter counts as this federation moves them (summary.json)."""
        return method.parameter_counts()

    @classmethod
    def scores_one_state(cls, method: FederatedMethod) -> bool:
        """Whether every client is scored with one and the same state: nothing trains, or
        the method is scored after the download and uploads its whole state, which the
        download (the same for every client) then replaces."""
        return not method.trains or (
            method.evaluate_after_download and all(method.is_uploaded(k) for k in method.state_dict())
        )

    @classmethod
    def holder(cls, cid: int) -> int:
        """The trained client whose state client `cid` is scored with (on Flower: the node that scores it)."""
        return cid

    def __init__(self, method: FederatedMethod, clients: Sequence[ClientShard], aggregation: str = "samples") -> None:
        self.method = method
        self.sizes = {c.client_id: c.num_samples for c in clients}
        self.aggregation = aggregation
        self.aggregate: State = {}
        self.bank: dict[int, State] = {}
        self.rounds_trained: dict[int, int] = {cid: 0 for cid in self.sizes}

    def restore(self, aggregate: State, bank: dict[int, State], rounds_trained: dict[int, int]) -> None:
        """Hold `aggregate`, `bank` and `rounds_trained`, as after the rounds that left them."""
        self.aggregate, self.bank, self.rounds_trained = aggregate, dict(bank), dict(rounds_trained)

    def state_dict(self) -> dict:
        """What the server keeps between rounds (the round loop's checkpoint holds it); shallow
        copies: a later round replaces entries, never tensors in place."""
        return {"aggregate": self.aggregate, "bank": dict(self.bank), "rounds_trained": dict(self.rounds_trained)}

    def load_state_dict(self, state: dict) -> None:
        """Continue from a `state_dict()`."""
        self.restore(state["aggregate"], state["bank"], state["rounds_trained"])

    def download(self, cid: int, round_index: int) -> State | None:
        """What client `cid` receives before training in round `round_index` (0-based):
        the method's `download` of the last aggregate and the bank; None in the first round,
        when the server holds nothing yet."""
        if round_index == 0:
            return None
        return self.method.download(cid, self.aggregate, self.bank)

    def client_update(self, cid: int, upload: State) -> ClientUpdate:
        """Client `cid`'s upload as the method's `aggregate` takes it, weighted per `aggregation`."""
        n_i = self.sizes[cid]
        return ClientUpdate(cid, n_i, upload, n_i if self.aggregation == "samples" else 1.0)

    def receive(self, round_index: int, uploads: Iterable[tuple[int, State]]) -> State:
        """Aggregate round `round_index`'s `uploads` ((client id, upload), in the order the
        round sampled them), check the aggregate, bank the uploads; returns the aggregate.
        Raises DivergenceError when the aggregate holds a NaN or an infinity."""
        updates = [self.client_update(cid, upload) for cid, upload in uploads]
        self.aggregate = self.method.aggregate(updates) if updates and updates[0].state else {}
        check_finite(self.method, self.aggregate, "the server's aggregate", round_index, None)
        self.bank.update({u.client_id: u.state for u in updates})
        for u in updates:
            self.rounds_trained[u.client_id] += 1
        return self.aggregate

    def upload_of(self, trained: State) -> State:
        """What a client whose training left `trained` sends this server: the method's upload."""
        return self.method.upload_of(trained)

    def evaluation_download(self, cid: int) -> State | None:
        """The download client `cid` is evaluated with: the method's `download` when the method
        evaluates after it (`evaluate_after_download`) or the client never trained (it has
        nothing else to be evaluated with); None: its own state as its training left it."""
        if self.method.evaluate_after_download or self.rounds_trained[cid] == 0:
            return self.method.download(cid, self.aggregate, self.bank)
        return None


def divergence(
    method: FederatedMethod,
    what: str,
    round_index: int,
    cid: int | None,
    step: int | None = None,
    lr: float | None = None,
) -> DivergenceError:
    """The error that stops a run whose numbers stopped meaning anything, naming where."""
    where = [f"round {round_index + 1}"] + ([f"client {cid}"] if cid is not None else [])
    where += [f"step {step}"] if step is not None else []
    rate = f" with lr {lr:g}" if lr is not None else ""
    return DivergenceError(
        f"method {method.name!r} diverged at {', '.join(where)}{rate}: {what}. The run is stopped and "
        "no run folder is written; lower the learning rate (or check the method's numerics) and run again."
    )


def check_finite(method: FederatedMethod, state: State, what: str, round_index: int, cid: int | None) -> None:
    """Raise `divergence` when `state` (`what`: its name in the message) holds a NaN or an infinity."""
    if all_finite(state):
        return
    bad = [k for k, v in state.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        raise divergence(method, f"{what} holds non-finite values in {', '.join(bad[:3])}{more}", round_index, cid)


def all_finite(state: State) -> bool:
    """Whether every floating-point tensor of `state` is finite, with one device sync (the
    per-tensor check is three operations and a sync per tensor). A NaN or infinity anywhere
    makes the float64 sum of all values NaN or infinite, and finite float16/bfloat16/float32
    values cannot overflow it (their largest, 3.4e38, times any tensor size stays far below
    float64's 1.8e308)."""
    sums = [v.sum(dtype=torch.float64) for v in state.values() if v.is_floating_point() and v.dtype != torch.float64]
    wide = [v for v in state.values() if v.dtype == torch.float64]  # could overflow: checked as they are
    total = (sums[0] if len(sums) == 1 else torch.stack(sums).sum()).item() if sums else 0.0
    return math.isfinite(total) and all(bool(torch.isfinite(v).all()) for v in wide)
