"""The federation kinds, one server each (as Flower writes one file per strategy): the run
option `federation` names one, and everything that differs between them is its server's
(`benchmark.federation.server.Server`: what trains in which round, what is uploaded, which
states are scored and how rounds are counted).

- `fedavg` (`FedAvgServer`): the method's own federation, the default;
- `local` (`LocalServer`): every client trains alone, nothing is sent;
- `central` (`CentralServer`): one client holding the union of the clients' data.

This module is read without torch (run names and table labels ask it); the servers are
imported when one is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmark.federation.server import Server

DEFAULT_FEDERATION = "fedavg"  # the method's own federation: its run names and rows carry no label


def server_class(federation: str) -> type[Server]:
    """The server of the federation kind `federation` (a ValueError naming the kinds otherwise)."""
    from benchmark.federation.servers.central import CentralServer  # lazy: run names and labels read this without torch
    from benchmark.federation.servers.fedavg import FedAvgServer  # lazy: as above
    from benchmark.federation.servers.local import LocalServer  # lazy: as above

    kinds = {kind.name: kind for kind in (FedAvgServer, LocalServer, CentralServer)}
    if federation not in kinds:
        raise ValueError(f"federation {federation!r} is not a federation kind; expected {' | '.join(kinds)}")
    return kinds[federation]


def federation_label(federation: str) -> str:
    """The federation as run names and table rows say it: nothing for the method's own (their
    names as before the other kinds existed), else its name."""
    return "" if federation == DEFAULT_FEDERATION else federation
