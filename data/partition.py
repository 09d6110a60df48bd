"""Federated partitions: which images and classes each client holds.

A `Partition` is plain data (client -> indices and classes) with a stable hash that a
run records, so two runs can be checked to have used the same split.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import asdict, dataclass
from typing import Sequence

# The authors' code shuffles base classes with this fixed seed, independent of the run seed.
BASE_CLASS_SHUFFLE_SEED = 2023


@dataclass(frozen=True)
class ClientShard:
    """One client's data. `class_ids` is its label space (dataset label ids, sorted);
    `test_indices` is its own test shard where the protocol has one (Dirichlet, domains)."""

    client_id: int
    train_indices: tuple[int, ...]
    class_ids: tuple[int, ...]
    test_indices: tuple[int, ...] | None = None
    domain: str | None = None

    @property
    def num_samples(self) -> int:
        return len(self.train_indices)


@dataclass(frozen=True)
class Partition:
    protocol: str
    clients: tuple[ClientShard, ...]
    base_class_ids: tuple[int, ...] = ()
    novel_class_ids: tuple[int, ...] = ()

    def manifest(self) -> dict:
        return asdict(self)

    @property
    def hash(self) -> str:
        payload = json.dumps(self.manifest(), sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]


def base_novel_split(num_classes: int) -> tuple[list[int], list[int]]:
    """Base = the first ceil(C/2) classes in the dataset's own order, novel = the rest."""
    n_base = math.ceil(num_classes / 2)
    return list(range(n_base)), list(range(n_base, num_classes))


def deal_classes(
    class_ids: Sequence[int], num_clients: int, seed: int = BASE_CLASS_SHUFFLE_SEED
) -> list[list[int]]:
    """Shuffle `class_ids` with `seed` and deal them without overlap: round(n/N) each,
    the last client takes what is left (DTD: 2x9 + 6; SUN397: 20x9 + 19)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    per_client = round(len(class_ids) / num_clients)
    if per_client < 1 or per_client * (num_clients - 1) >= len(class_ids):
        raise ValueError(
            f"cannot deal {len(class_ids)} base classes to {num_clients} clients with at least one "
            f"class each; use at most {max(1, len(class_ids) // 2)} clients (--clients)"
        )
    shuffled = list(class_ids)
    random.Random(seed).shuffle(shuffled)
    dealt = [shuffled[i * per_client : (i + 1) * per_client] for i in range(num_clients - 1)]
    dealt.append(shuffled[(num_clients - 1) * per_client :])
    return [sorted(group) for group in dealt]


def base2novel_partition(
    train_labels: Sequence[int], num_classes: int, num_clients: int, shots: int, seed: int
) -> Partition:
    """The paper's label-shift protocol: base classes dealt to clients, K shots each."""
    from data.fewshot import few_shot_indices

    base, novel = base_novel_split(num_classes)
    clients = []
    for client_id, class_ids in enumerate(deal_classes(base, num_clients)):
        indices = few_shot_indices(train_labels, shots, seed, class_ids)
        clients.append(ClientShard(client_id, tuple(indices), tuple(class_ids)))
    return Partition("base2novel", tuple(clients), tuple(base), tuple(novel))
