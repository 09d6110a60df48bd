"""The federation's round loop, a loop object with its own state (as Lightning's loops carry
theirs): `RoundLoop`.

It owns what a federation keeps between rounds -- the position in the schedule
(`next_round`), every client's state, the server (its aggregate, bank and round counts),
the rounds' logs -- and runs the rounds from `next_round` on: downloads, the sampled
clients' local training (`RoundTraining.train_round`, the simulator's), uploads and
aggregation. `state_dict()` is everything needed to go on after the last completed round
exactly as if the run had never stopped, the RNG states included; `load_state_dict()`
restores it. A round checkpoint is a `state_dict()` (`benchmark.runs.checkpoints`).

The run follows the rounds through one hook interface, `RoundHooks`, the same object every
engine is given (`benchmark.runs.engines`): a round ended, an evaluated round's states to
score (or, from an engine whose clients score them, their scores), and, after every round,
the loop's state to checkpoint.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from benchmark import flops
from benchmark.federation.server import Server
from benchmark.memory import PeakMemory
from benchmark.method import State, state_bytes
from benchmark.progress import progress_bar

PerClient = dict[int, dict[str, float]]  # client id -> metric -> value

# The keys of `RoundLoop.state_dict()`: a round checkpoint's "federation" (format 1 of
# `benchmark.runs.checkpoints`, the fields the simulator's snapshot had before the loop).
STATE_KEYS = ("next_round", "states", "aggregate", "bank", "rounds", "rounds_trained", "rng")


@dataclass
class RoundLog:
    round: int
    clients: list[int]
    train_loss: dict[int, float]
    bytes_up: int
    bytes_down: int
    model_seconds: float  # forward + backward + optimizer step, summed over batches
    total_seconds: float  # the whole round: state swaps, optimizer setup, data loading, aggregation
    train_flops: int = 0  # executed by the round's training steps (benchmark.flops; 0 when not counted)
    data_seconds: float = 0.0  # fetching and collating the training batches
    optimizer_seconds: float = 0.0  # the method's configure_optimizers, once per client-round
    lr: dict[int, float] = field(default_factory=dict)  # client -> the lr its client-round started at

    def add(self, cid: int, trained: ClientRound) -> None:
        """Client `cid`'s part of the round: its loss, lr, seconds and upload bytes."""
        self.train_loss[cid] = trained.loss
        if trained.lr is not None:
            self.lr[cid] = trained.lr
        self.model_seconds += trained.model_seconds
        self.data_seconds += trained.data_seconds
        self.optimizer_seconds += trained.optimizer_seconds
        self.bytes_up += state_bytes(trained.upload)


@dataclass
class ClientRound:
    """What one client's local training left: its whole state (kept by the client) and the
    part of it that is uploaded (the method's `upload_keys`)."""

    state: State
    upload: State
    loss: float  # mean training loss of the client-round
    model_seconds: float
    data_seconds: float
    optimizer_seconds: float
    lr: float | None = None  # the lr the client-round started at (None: no optimizer)


@dataclass
class FederationResult:
    client_states: dict[int, State]  # each client's personalized state for evaluation
    rounds: list[RoundLog] = field(default_factory=list)
    final_download_bytes: int = 0
    rounds_trained: dict[int, int] = field(default_factory=dict)  # client -> rounds it trained in ({}: nothing trains)

    @property
    def never_trained(self) -> list[int]:
        """Clients that never trained: evaluated with the final download alone."""
        return sorted(cid for cid, n in self.rounds_trained.items() if n == 0)


@dataclass
class RoundHooks:
    """What a federation tells its run as the rounds go: the one hook interface of the round
    loop and of every engine (`benchmark.runs.engines`; the run's are `recording.RunRecord`'s).
    Every hook is optional: a loop without hooks runs its rounds and returns."""

    on_round_end: Callable[[RoundLog], Any] | None = None
    # An evaluated round (one of `eval_rounds`, the last excepted: the caller scores the
    # final states): its states, per client, to score in this process; or its scores, where
    # the engine's clients scored them.
    on_states: Callable[[int, dict[int, State]], Any] | None = None
    on_scores: Callable[[int, PerClient], Any] | None = None
    eval_rounds: frozenset[int] = frozenset()
    memory: PeakMemory = field(default_factory=PeakMemory)
    progress: bool = False
    # After every round, the round loop's `state_dict()` (checkpointing engines keep it).
    on_checkpoint: Callable[[dict[str, Any]], Any] | None = None


class RoundTraining(Protocol):
    """The local training the round loop runs (the simulator's)."""

    def train_round(
        self, sampled: Sequence[int], round_index: int, states: dict[int, State], received: dict[int, State | None]
    ) -> dict[int, ClientRound]: ...

    def evaluation_states(self, states: dict[int, State]) -> tuple[dict[int, State], int]: ...


class RoundLoop:
    """The rounds of `schedule` over `server`, each round's sampled clients trained by
    `training`, starting from the clients' `states` (updated in place as rounds end)."""

    def __init__(
        self,
        schedule: list[list[int]],
        server: Server,
        training: RoundTraining,
        states: dict[int, State],
        hooks: RoundHooks | None = None,
        progress: bool = False,
        name: str = "",
    ) -> None:
        self.schedule, self.server, self.training = schedule, server, training
        self.states = states
        self.hooks = hooks if hooks is not None else RoundHooks()
        self.progress, self.name = progress, name
        self.next_round = 0  # 0-based index of the first round still to run
        self.rounds: list[RoundLog] = []

    @property
    def evaluated_rounds(self) -> list[int]:
        """The rounds (1-based) after which the loop hands every client's state to `on_states`;
        the final round is the caller's (it scores `FederationResult.client_states`)."""
        return sorted(r for r in self.hooks.eval_rounds if r < len(self.schedule))

    def run(self) -> FederationResult:
        """Run the rounds from `next_round` to the end of the schedule."""
        total = len(self.schedule)
        bar = progress_bar(
            total=total,
            desc=f"training {self.name}",
            unit="rounds",
            enabled=self.progress,
            initial=self.next_round,
            leave=False,
        )
        try:
            while self.next_round < total:
                log = self.advance()
                self.on_round_end(log)
                bar.set_postfix(loss=f"{np.mean(list(log.train_loss.values())):.3f}")
                bar.update()
        finally:
            bar.close()
        return FederationResult(self.states, list(self.rounds), rounds_trained=self.server.rounds_trained)

    def advance(self) -> RoundLog:
        """Run round `next_round`: the downloads, the sampled clients' local training, their
        uploads aggregated by the server. Returns the round's log."""
        round_index, server = self.next_round, self.server
        sampled = self.schedule[round_index]
        started = time.perf_counter()
        log = RoundLog(round_index + 1, sampled, {}, 0, 0, 0.0, 0.0)
        received = {cid: server.download(cid, round_index) for cid in sampled}
        log.bytes_down += sum(state_bytes(r) for r in received.values() if r is not None)
        account = flops.current()
        before = account.totals.get("train", 0) if account else 0
        trained = self.training.train_round(sampled, round_index, self.states, received)
        log.train_flops += (account.totals.get("train", 0) - before) if account else 0
        for cid in sampled:
            self.states[cid] = trained[cid].state
            log.add(cid, trained[cid])
        server.receive(round_index, [(cid, trained[cid].upload) for cid in sampled])
        log.total_seconds = time.perf_counter() - started
        self.rounds.append(log)
        self.next_round += 1
        return log

    def on_round_end(self, log: RoundLog) -> None:
        """The hooks of a round that ended: its log, its states where it is evaluated, then
        the loop's state to checkpoint (taken last: the RNG states after the evaluation)."""
        hooks = self.hooks
        if hooks.on_round_end:
            hooks.on_round_end(log)
        if hooks.on_states and log.round in self.evaluated_rounds:
            hooks.on_states(log.round, self.training.evaluation_states(self.states)[0])
        if hooks.on_checkpoint:
            hooks.on_checkpoint(self.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """The loop's state after its last completed round (`STATE_KEYS`): plain tensors,
        numbers and dicts, so `torch.save` writes it. Shallow copies: a later round replaces
        entries (never tensors in place), and the state may be saved only after a stop in the
        middle of that round."""
        server = self.server.state_dict()
        return {
            "next_round": self.next_round,
            "states": dict(self.states),
            "aggregate": server["aggregate"],
            "bank": server["bank"],
            "rounds": [dict(vars(log)) for log in self.rounds],
            "rounds_trained": server["rounds_trained"],
            "rng": rng_states(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the rounds `state` (a `state_dict()`) completed: the clients' states,
        the server's, the rounds' logs and the RNG states. ValueError when it is not one."""
        check_state_dict(state)
        if state["next_round"] > len(self.schedule):
            raise ValueError(f"it completed {state['next_round']} rounds, the schedule has {len(self.schedule)}")
        self.states.update(state["states"])
        self.server.load_state_dict({k: state[k] for k in ("aggregate", "bank", "rounds_trained")})
        self.next_round = state["next_round"]
        self.rounds = [RoundLog(**log) for log in state["rounds"]]
        restore_rng_states(state["rng"])


def check_state_dict(state: Any) -> None:
    """Raise ValueError unless `state` is a `RoundLoop.state_dict()` (what a round checkpoint
    holds), naming what is missing or foreign."""
    if not isinstance(state, dict):
        raise ValueError(f"the round loop's state is a dict, got {type(state).__name__}")
    missing, foreign = set(STATE_KEYS) - set(state), set(state) - set(STATE_KEYS)
    if missing or foreign:
        raise ValueError(f"the round loop's state lacks {sorted(missing)} and has foreign keys {sorted(foreign)}")
    names = {f.name for f in fields(RoundLog)}
    for log in state["rounds"]:
        if not isinstance(log, dict) or not set(log) <= names:
            raise ValueError(f"a round's log holds other fields than a RoundLog's: {log!r:.200}")


def rng_states() -> dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
