"""`federation: fedavg`, the method's own federation (the default): the sampled clients of
every round receive the method's `download`, train, upload the method's `upload_keys`, and
the server aggregates them (the method's `aggregate`); every client is scored with its own
state (and the final download where the method evaluates after it)."""

from __future__ import annotations

from benchmark.federation.server import Server


class FedAvgServer(Server):
    """The method's server as `Server` writes it: its schedule is the sampled one, each client
    is scored with its own state and counts its own rounds."""

    name = "fedavg"
