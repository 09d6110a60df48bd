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
    """One client's data. `class_ids`: the classes its images belong to (dataset label ids,
    sorted); `label_space`: the classes its classifier spans in training, when that is more
    than its own (base2novel: all base classes, as in the authors' code, where a client's
    model learns that its images are never another client's classes); `test_indices`: its
    own test shard where the protocol has one (Dirichlet, domains); `domain`: the domain
    it draws images from, or in a federation over several datasets its dataset."""

    client_id: int
    train_indices: tuple[int, ...]
    class_ids: tuple[int, ...]
    test_indices: tuple[int, ...] | None = None
    domain: str | None = None
    label_space: tuple[int, ...] | None = None

    @property
    def train_classes(self) -> tuple[int, ...]:
        """The label space of local training: `label_space`, or else its own classes."""
        return self.label_space if self.label_space is not None else self.class_ids

    @property
    def num_samples(self) -> int:
        return len(self.train_indices)


@dataclass(frozen=True)
class Partition:
    """`targets`: what the federation is tested on beyond its clients' own data, by name
    (msst: the held-out domain; transfer: the test datasets); empty for the others."""

    protocol: str
    clients: tuple[ClientShard, ...]
    base_class_ids: tuple[int, ...] = ()
    novel_class_ids: tuple[int, ...] = ()
    targets: tuple[str, ...] = ()

    def manifest(self) -> dict:
        manifest = asdict(self)
        if not self.targets:  # absent unless used, so older partitions keep their hash
            del manifest["targets"]
        return manifest

    @property
    def hash(self) -> str:
        payload = json.dumps(self.manifest(), sort_keys=True).encode()
        return hashlib.sha256(payload).hexdigest()[:16]


def base_novel_split(num_classes: int) -> tuple[list[int], list[int]]:
    """Base = the first ceil(C/2) classes in the dataset's own order, novel = the rest."""
    n_base = math.ceil(num_classes / 2)
    return list(range(n_base)), list(range(n_base, num_classes))


CLASS_DEALINGS = ("balanced", "authors")


def deal_classes(
    class_ids: Sequence[int], num_clients: int, seed: int = BASE_CLASS_SHUFFLE_SEED, rule: str = "balanced"
) -> list[list[int]]:
    """Shuffle `class_ids` with `seed` and deal them to `num_clients` without overlap.

    `balanced`: sizes differ by at most one class (the first n mod N clients take one more);
    every count from 1 to n works. `authors`: the authors' code, round(n/N) each and the last
    client takes what is left (DTD: 2x9 + 6; SUN397: 20x9 + 19) -- the paper's partitions,
    but undefined for some counts (`valid_client_counts`). A count that cannot be dealt is a
    ValueError naming the counts that can.
    """
    n = len(class_ids)
    if rule not in CLASS_DEALINGS:
        raise ValueError(f"unknown class dealing {rule!r}; choose one of {', '.join(CLASS_DEALINGS)}")
    valid = valid_client_counts(n, rule)
    if num_clients not in valid:
        raise ValueError(
            f"cannot deal {n} base classes to {num_clients} clients with the {rule} dealing (at least one class "
            f"each): use --clients {_ranges(valid)}" + ("" if rule == "balanced" else " or class_dealing: balanced")
        )
    shuffled = list(class_ids)
    random.Random(seed).shuffle(shuffled)
    if rule == "authors":
        per_client = round(n / num_clients)
        sizes = [per_client] * (num_clients - 1) + [n - per_client * (num_clients - 1)]
    else:
        sizes = [n // num_clients + (i < n % num_clients) for i in range(num_clients)]
    starts = [sum(sizes[:i]) for i in range(num_clients)]
    return [sorted(shuffled[start : start + size]) for start, size in zip(starts, sizes)]


def valid_client_counts(num_classes: int, rule: str = "balanced") -> list[int]:
    """The client counts that `deal_classes` can serve from `num_classes` classes."""
    if rule == "balanced":
        return list(range(1, num_classes + 1))
    return [
        k
        for k in range(1, num_classes + 1)
        if 0 < round(num_classes / k) and round(num_classes / k) * (k - 1) < num_classes
    ]


def _ranges(values: list[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> '1-3, 5, 7-8'."""
    if not values:
        return "(none)"
    runs = [[values[0], values[0]]]
    for value in values[1:]:
        if value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def base2novel_partition(
    train_labels: Sequence[int],
    num_classes: int,
    num_clients: int,
    shots: int,
    seed: int,
    dealing: str = "balanced",
) -> Partition:
    """The paper's label-shift protocol: base classes dealt to clients, K shots each."""
    from data.fewshot import few_shot_indices

    base, novel = base_novel_split(num_classes)
    clients = []
    for client_id, class_ids in enumerate(deal_classes(base, num_clients, rule=dealing)):
        indices = few_shot_indices(train_labels, shots, seed, class_ids)
        clients.append(ClientShard(client_id, tuple(indices), tuple(class_ids), label_space=tuple(base)))
    return Partition("base2novel", tuple(clients), tuple(base), tuple(novel))


# ---------------------------------------------------------------------------------------
# Class-chunk federations (the FedTPG / FedMVP harness): one client per block of classes


def chunk_count(num_classes: int, per_client: int) -> int:
    """How many clients `num_classes` classes make at `per_client` classes each: the
    ratio rounded half to even, as numpy.around does (2.5 -> 2, 0.5 -> 0), and at least 1."""
    import numpy as np

    if per_client < 1:
        raise ValueError(f"classes per client must be >= 1, got {per_client}")
    return max(1, int(np.around(num_classes / per_client)))


def chunk_classes(class_ids: Sequence[int], per_client: int) -> list[list[int]]:
    """Contiguous blocks of `per_client` classes in the given order; the last block takes
    whatever is left, so it may be larger or smaller than `per_client` (50 classes at 20
    per client -> [20, 30]; 51 -> [20, 20, 11]; 19 -> [19])."""
    class_ids = list(class_ids)
    if not class_ids:
        raise ValueError("no classes to deal to clients")
    count = chunk_count(len(class_ids), per_client)
    blocks = [class_ids[j * per_client : (j + 1) * per_client] for j in range(count - 1)]
    blocks.append(class_ids[(count - 1) * per_client :])
    return blocks


@dataclass(frozen=True)
class ChunkGroup:
    """One part of a class-chunk federation: a dataset (or a source domain of one) whose
    classes `class_ids` are dealt in blocks; `train_pool` restricts its images (a domain's
    images), None = every train image of those classes."""

    name: str
    class_ids: tuple[int, ...]
    train_pool: tuple[int, ...] | None = None


def class_chunk_partition(
    train_labels: Sequence[int],
    groups: Sequence[ChunkGroup],
    per_client: int,
    shots: int,
    seed: int,
    protocol: str,
    base_class_ids: Sequence[int] = (),
    novel_class_ids: Sequence[int] = (),
    targets: Sequence[str] = (),
) -> Partition:
    """Clients = group x contiguous block of `per_client` classes, numbered group by group.

    Each client holds `shots` train images of each of its classes (drawn from the group's
    pool), trains over its own classes only, and records its group in `domain`.
    """

    def images_by_class(positions) -> dict[int, list[int]]:
        by_class: dict[int, list[int]] = {}
        for i in positions:
            by_class.setdefault(train_labels[i], []).append(i)
        return by_class

    everything = None  # built once: ImageNet has 1.28M train images and 50+ clients
    clients: list[ClientShard] = []
    for group in groups:
        if group.train_pool is None:
            everything = everything if everything is not None else images_by_class(range(len(train_labels)))
            by_class = everything
        else:
            by_class = images_by_class(group.train_pool)
        for block in chunk_classes(group.class_ids, per_client):
            client_id = len(clients)
            # Same rule as data.fewshot: per class in label order, one RNG per client.
            rng = random.Random(seed * 100_003 + client_id)
            indices: list[int] = []
            for label in sorted(block):
                pool = by_class.get(label, [])
                if not pool:
                    where = f" in domain {group.name}" if group.train_pool is not None else f" in {group.name}"
                    raise ValueError(f"class {label} has no training image{where}")
                indices.extend(pool if shots <= 0 or len(pool) <= shots else rng.sample(pool, shots))
            clients.append(ClientShard(client_id, tuple(sorted(indices)), tuple(sorted(block)), domain=group.name))
    return Partition(protocol, tuple(clients), tuple(base_class_ids), tuple(novel_class_ids), tuple(targets))


# ---------------------------------------------------------------------------------------
# Dirichlet label shift (CIFAR) and feature + label shift (DomainNet, Office-Caltech10)

_MAX_DIRICHLET_DRAWS = 1000


def _dirichlet_split(labels: Sequence[int], num_clients: int, beta: float, rng, min_size: int) -> list[list[int]]:
    """Split positions 0..len(labels)-1 over clients, class by class, with Dirichlet(beta)
    proportions, redrawing until every client holds at least `min_size` items.

    As in the usual FL code (NIID-Bench, FedOTP): a client already holding more than
    its fair share n/N gets no more of the next classes, which keeps sizes from exploding.
    """
    import numpy as np

    labels_arr = np.asarray(labels, dtype=np.int64)
    n = len(labels_arr)
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if beta <= 0:
        raise ValueError(f"the Dirichlet concentration beta must be > 0, got {beta}")
    if n < num_clients * min_size:
        raise ValueError(
            f"{n} images cannot give {num_clients} clients at least {min_size} each; "
            "use fewer clients (--clients) or a smaller --min-client-size"
        )
    classes = np.unique(labels_arr)
    for _ in range(_MAX_DIRICHLET_DRAWS):
        shares: list[list[int]] = [[] for _ in range(num_clients)]
        for label in classes:
            positions = np.flatnonzero(labels_arr == label)
            rng.shuffle(positions)
            proportions = rng.dirichlet(np.full(num_clients, beta))
            open_clients = np.array([len(share) < n / num_clients for share in shares])
            proportions = proportions * open_clients
            proportions = proportions / proportions.sum()
            cuts = (np.cumsum(proportions) * len(positions)).astype(int)[:-1]
            for share, chunk in zip(shares, np.split(positions, cuts)):
                share.extend(int(p) for p in chunk)
        if min(len(share) for share in shares) >= min_size:
            return [sorted(share) for share in shares]
    raise ValueError(
        f"no Dirichlet(beta={beta}) split of {n} images over {num_clients} clients gave every client "
        f">= {min_size} images in {_MAX_DIRICHLET_DRAWS} draws; raise --beta or lower --min-client-size or --clients"
    )


def _split_like(
    train_labels: Sequence[int], train_shares: list[list[int]], test_labels: Sequence[int], rng
) -> list[list[int]]:
    """Split test positions so that each client gets, per class, the same fraction of the
    class's test images as it holds of the class's train images (every test item once)."""
    import numpy as np

    num_clients = len(train_shares)
    train_counts: dict[int, np.ndarray] = {}
    for client, share in enumerate(train_shares):
        for position in share:
            counts = train_counts.setdefault(int(train_labels[position]), np.zeros(num_clients))
            counts[client] += 1
    test_arr = np.asarray(test_labels, dtype=np.int64)
    shares: list[list[int]] = [[] for _ in range(num_clients)]
    for label in np.unique(test_arr):
        positions = np.flatnonzero(test_arr == label)
        rng.shuffle(positions)
        counts = train_counts.get(int(label))
        if counts is None:  # a class with no train images here: spread it evenly
            counts = np.ones(num_clients)
        cuts = np.round(np.cumsum(counts / counts.sum()) * len(positions)).astype(int)[:-1]
        for share, chunk in zip(shares, np.split(positions, cuts)):
            share.extend(int(p) for p in chunk)
    return [sorted(share) for share in shares]


def _client_few_shot(train_labels: Sequence[int], indices: list[int], shots: int, seed: int) -> list[int]:
    from data.fewshot import few_shot_subset

    return indices if shots <= 0 else few_shot_subset(train_labels, indices, shots, seed)


def dirichlet_partition(
    train_labels: Sequence[int],
    test_labels: Sequence[int],
    num_clients: int,
    beta: float,
    seed: int,
    min_size: int = 2,
    shots: int = 0,
    num_classes: int | None = None,
) -> Partition:
    """Label shift over `num_clients` clients by Dirichlet(beta) (CIFAR protocol).

    Every train index goes to exactly one client (before the optional `shots`-per-class
    sample within each client's share); each client's test shard has the same class
    proportions as its train share; every client's label space is all classes.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    train_shares = _dirichlet_split(train_labels, num_clients, beta, rng, min_size)
    test_shares = _split_like(train_labels, train_shares, test_labels, rng)
    num_classes = num_classes or max([*train_labels, *test_labels]) + 1
    all_classes = tuple(range(num_classes))
    clients = tuple(
        ClientShard(
            client_id,
            tuple(_client_few_shot(train_labels, train, shots, seed * 100_003 + client_id)),
            all_classes,
            test_indices=tuple(test),
        )
        for client_id, (train, test) in enumerate(zip(train_shares, test_shares))
    )
    return Partition("dirichlet", clients)


def domain_partition(
    train_labels: Sequence[int],
    test_labels: Sequence[int],
    train_domains: Sequence[str],
    test_domains: Sequence[str],
    clients_per_domain: int,
    beta: float,
    seed: int,
    min_size: int = 2,
    shots: int = 0,
    domain_names: Sequence[str] | None = None,
    num_classes: int | None = None,
) -> Partition:
    """Feature + label shift: each domain's images go to its own `clients_per_domain`
    clients by a Dirichlet(beta) split of its classes; the same proportions split the
    domain's test images. Clients are numbered domain by domain and never cross domains."""
    import numpy as np

    if len(train_domains) != len(train_labels) or len(test_domains) != len(test_labels):
        raise ValueError("domain_partition needs one domain per image in train and test")
    if domain_names is None:
        domain_names = list(dict.fromkeys(train_domains))  # first-appearance order, deterministic
    unknown = (set(train_domains) | set(test_domains)) - set(domain_names)
    if unknown:
        raise ValueError(f"images carry domains {sorted(unknown)} outside domain_names {list(domain_names)}")
    num_classes = num_classes or max([*train_labels, *test_labels]) + 1
    all_classes = tuple(range(num_classes))
    clients: list[ClientShard] = []
    for domain_index, domain in enumerate(domain_names):
        train_idx = [i for i, d in enumerate(train_domains) if d == domain]
        test_idx = [i for i, d in enumerate(test_domains) if d == domain]
        rng = np.random.default_rng([seed, domain_index])
        train_sub = [train_labels[i] for i in train_idx]
        train_shares = _dirichlet_split(train_sub, clients_per_domain, beta, rng, min_size)
        test_shares = _split_like(train_sub, train_shares, [test_labels[i] for i in test_idx], rng)
        for train, test in zip(train_shares, test_shares):
            client_id = len(clients)
            indices = [train_idx[p] for p in train]
            clients.append(
                ClientShard(
                    client_id,
                    tuple(_client_few_shot(train_labels, indices, shots, seed * 100_003 + client_id)),
                    all_classes,
                    test_indices=tuple(test_idx[p] for p in test),
                    domain=domain,
                )
            )
    return Partition("domains", tuple(clients))


def pathological_partition(
    train_labels: Sequence[int],
    test_labels: Sequence[int],
    num_clients: int,
    classes_per_client: int,
    seed: int,
    shots: int = 0,
    num_classes: int | None = None,
) -> Partition:
    """Pathological label shift (McMahan et al.'s shards; FL-bench's and Flower Datasets'
    k-classes partitioner): client i holds class i mod C and `classes_per_client` - 1 other
    classes drawn at random, so classes overlap between clients when N * k > C. Each class's
    train images, and its test images, are split evenly at random among the clients that
    hold it; a class no client holds is left out. A client's label space is every class."""
    import numpy as np

    num_classes = num_classes or max([*train_labels, *test_labels]) + 1
    if not 1 <= classes_per_client <= num_classes:
        raise ValueError(f"classes_per_client = {classes_per_client} must be between 1 and the {num_classes} classes")
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    rng = np.random.default_rng(seed)
    held = []
    for client in range(num_clients):
        first = client % num_classes
        others = rng.choice([c for c in range(num_classes) if c != first], classes_per_client - 1, replace=False)
        held.append(sorted({first, *(int(c) for c in others)}))
    holders = {c: [i for i, classes in enumerate(held) if c in classes] for c in range(num_classes)}

    def deal(labels: Sequence[int]) -> list[list[int]]:
        shares: list[list[int]] = [[] for _ in range(num_clients)]
        labels_arr = np.asarray(labels, dtype=np.int64)
        for label, clients in holders.items():
            if not clients:
                continue
            positions = np.flatnonzero(labels_arr == label)
            rng.shuffle(positions)
            for share, chunk in zip((shares[i] for i in clients), np.array_split(positions, len(clients))):
                share.extend(int(p) for p in chunk)
        return [sorted(share) for share in shares]

    train_shares, test_shares = deal(train_labels), deal(test_labels)
    empty = [i for i, share in enumerate(train_shares) if not share]
    if empty:
        raise ValueError(
            f"client {empty[0]} got no training image ({num_clients} clients x {classes_per_client} classes "
            "share classes too thin); use fewer clients or more classes per client"
        )
    all_classes = tuple(range(num_classes))
    clients = tuple(
        ClientShard(
            client_id,
            tuple(_client_few_shot(train_labels, train, shots, seed * 100_003 + client_id)),
            tuple(held[client_id]),
            test_indices=tuple(test),
            label_space=all_classes,
        )
        for client_id, (train, test) in enumerate(zip(train_shares, test_shares))
    )
    return Partition("pathological", clients)


def class_counts(partition: Partition, train_labels: Sequence[int], num_classes: int) -> list[list[int]]:
    """clients x classes: how many training images of each class each client holds."""
    counts = [[0] * num_classes for _ in partition.clients]
    for row, client in zip(counts, partition.clients):
        for index in client.train_indices:
            row[train_labels[index]] += 1
    return counts
