"""`federation: local`, every client alone: each client trains in the rounds the schedule
gives it, for the same local epochs, with the same seeds, as under the federation; nothing
is uploaded, aggregated or downloaded, so each client's model is what its own data makes of
the initial state. It equals a one-client federation of that client
(`tests/federation/test_baselines.py`)."""

from __future__ import annotations

from typing import Iterable

from benchmark.federation.server import Server
from benchmark.method import FederatedMethod, State


class LocalServer(Server):
    """The server of a run without federation: it receives nothing and sends nothing; it
    only counts the rounds each client trained in (the run's `rounds_trained`)."""

    name = "local"

    @classmethod
    def parameter_counts(cls, method: FederatedMethod) -> dict[str, int]:
        return {**method.parameter_counts(), "uploaded_params": 0}  # nothing leaves a client

    @classmethod
    def scores_one_state(cls, method: FederatedMethod) -> bool:
        return not method.trains  # else each client's own training

    def download(self, cid: int, round_index: int) -> State | None:
        return None

    def upload_of(self, trained: State) -> State:
        return {}

    def receive(self, round_index: int, uploads: Iterable[tuple[int, State]]) -> State:
        for cid, _ in uploads:
            self.rounds_trained[cid] += 1
        return {}

    def evaluation_download(self, cid: int) -> State | None:
        return None  # every client is scored with what its own training left
