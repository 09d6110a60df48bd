"""clients.pt: the states a finished run scored its clients with (each client's personal
state with its final download applied, fine-tuned under `--finetune-epochs`), so that
`fedbench evaluate RUN_DIR` scores them again, or on another dataset or protocol, without
training. Prompts and adapters: small (a client state holds no frozen backbone weight)."""

from __future__ import annotations

from pathlib import Path

import torch

from benchmark.config import ConfigError
from benchmark.method import FederatedMethod, State
from data.partition import Partition

CLIENTS_FILE = "clients.pt"


def save_clients(path: Path, states: dict[int, State]) -> None:
    """`states` (client id -> state) on the CPU; tensors several clients share are stored once."""
    torch.save({int(cid): {k: v.detach().cpu() for k, v in s.items()} for cid, s in states.items()}, path)


def check_clients_file(path: Path) -> None:
    """A ConfigError when `path` is not a whole file `save_clients` wrote (torch writes a zip
    archive; one cut short, by a full disk or a copy interrupted, has no central directory):
    said before a model is built or a folder written."""
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ConfigError(unreadable_clients(path, "it is not a whole zip archive, as torch.save writes"))


def unreadable_clients(path: Path, why: str) -> str:
    return (
        f"{path} cannot be read ({why}): it is truncated or damaged, so the clients it saved are lost. Run the cell "
        "again (its `fedbench run` or `fedbench reproduce` command with --force) to write it anew, or delete that "
        "run folder"
    )


def load_clients(run_dir: Path, partition: Partition, method: FederatedMethod) -> dict[int, State]:
    """The saved state of every client of `partition` (by id) from the run folder `run_dir`;
    a method that trains nothing scores its initial state (nothing was saved)."""
    path = run_dir / CLIENTS_FILE
    if not path.is_file():
        if not method.trains:
            initial = method.client_state()
            return {c.client_id: initial for c in partition.clients}
        raise ConfigError(
            f"{run_dir} holds no {CLIENTS_FILE}: pass a run folder written by `fedbench run` of this version "
            "(a run on Flower keeps its clients' states on its clients)"
        )
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, ValueError) as exc:  # torch's reader: truncated, damaged, not its format
        raise ConfigError(
            unreadable_clients(path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        ) from None
    missing = [c.client_id for c in partition.clients if c.client_id not in saved]
    if missing:
        raise ConfigError(
            f"{run_dir} saved clients {sorted(saved)}, but this partition has clients {missing[:10]} too: "
            f"`fedbench evaluate` scores the run's {len(saved)} clients, so pass a --dataset / --protocol (and its "
            f"options) whose partition has at most {len(saved)} clients, or run the cell with more clients "
            "(`fedbench run --clients N`) and evaluate that"
        )
    own = method.client_state()
    for cid in (c.client_id for c in partition.clients):
        wrong = [k for k, v in saved[cid].items() if k not in own or own[k].shape != v.shape]
        if wrong:
            raise ConfigError(
                f"{run_dir}: client {cid}'s saved state does not fit {method.name} here (keys {wrong[:3]}); "
                "evaluate with the run's method and backbone"
            )
    return {c.client_id: saved[c.client_id] for c in partition.clients}
