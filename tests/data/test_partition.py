"""Federated partitions: class dealing (base-to-novel), Dirichlet label shift, domains."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from data.partition import (
    base2novel_partition,
    base_novel_split,
    deal_classes,
    dirichlet_partition,
    domain_partition,
)


@pytest.mark.parametrize(
    "num_classes, n_base, sizes",
    [
        (100, 50, [5] * 10),  # Caltech101
        (47, 24, [2] * 9 + [6]),  # DTD
        (397, 199, [20] * 9 + [19]),  # SUN397
        (37, 19, [2] * 9 + [1]),  # OxfordPets
    ],
)
def test_base_classes_dealt_without_overlap(num_classes, n_base, sizes):
    """The authors' dealing (the paper presets' class_dealing) gives the paper's sizes."""
    base, novel = base_novel_split(num_classes)
    assert base == list(range(n_base)) and novel == list(range(n_base, num_classes))
    dealt = deal_classes(base, 10, rule="authors")
    assert [len(group) for group in dealt] == sizes
    flat = [c for group in dealt for c in group]
    assert sorted(flat) == base  # no overlap, all base classes covered
    assert dealt == deal_classes(base, 10, rule="authors")  # fixed shuffle seed


def test_base2novel_partition_clients_hold_their_classes():
    labels = [i % 20 for i in range(400)]
    partition = base2novel_partition(labels, 20, num_clients=5, shots=4, seed=1)
    for client in partition.clients:
        assert {labels[i] for i in client.train_indices} == set(client.class_ids)
        assert len(client.train_indices) == 4 * len(client.class_ids)


def _labels(n: int, num_classes: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(num_classes) for _ in range(n)]


def _mean_entropy(partition, labels) -> float:
    total = 0.0
    for client in partition.clients:
        counts = Counter(labels[i] for i in client.train_indices)
        n = sum(counts.values())
        total -= sum(c / n * math.log(c / n) for c in counts.values())
    return total / len(partition.clients)


TRAIN, TEST = _labels(3000, 10, 0), _labels(1000, 10, 1)


@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_dirichlet_covers_every_index_once_and_respects_min_size(beta):
    partition = dirichlet_partition(TRAIN, TEST, num_clients=50, beta=beta, seed=1, min_size=5)
    assert partition.protocol == "dirichlet" and len(partition.clients) == 50
    train = [i for c in partition.clients for i in c.train_indices]
    test = [i for c in partition.clients for i in c.test_indices]
    assert sorted(train) == list(range(len(TRAIN))) and sorted(test) == list(range(len(TEST)))
    assert min(c.num_samples for c in partition.clients) >= 5
    assert all(c.class_ids == tuple(range(10)) and c.domain is None for c in partition.clients)


def test_dirichlet_test_shard_follows_train_proportions():
    partition = dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.3, seed=2)
    train_class_totals, test_class_totals = Counter(TRAIN), Counter(TEST)
    for client in partition.clients:
        train_counts = Counter(TRAIN[i] for i in client.train_indices)
        test_counts = Counter(TEST[i] for i in client.test_indices)
        for label in range(10):
            expected = train_counts[label] / train_class_totals[label] * test_class_totals[label]
            assert abs(test_counts[label] - expected) <= 1.0 + 1e-9  # rounding of cumulative cuts
        assert set(test_counts) <= set(train_counts)  # no test class the client never trained on


def test_dirichlet_skew_grows_as_beta_falls():
    entropies = [
        _mean_entropy(dirichlet_partition(TRAIN, TEST, num_clients=20, beta=beta, seed=3), TRAIN)
        for beta in (100.0, 1.0, 0.1)
    ]
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[0] > 0.95 * math.log(10)  # near-uniform labels at large beta


def test_dirichlet_reproducible_from_seed():
    first = dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=7)
    assert first == dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=7)
    assert first.hash == dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=7).hash
    other = dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=8)
    assert other.hash != first.hash


def test_dirichlet_impossible_min_size_is_a_clear_error():
    with pytest.raises(ValueError, match="at least 50"):
        dirichlet_partition(TRAIN[:100], TEST[:10], num_clients=10, beta=0.5, seed=1, min_size=50)


def test_dirichlet_few_shot_within_each_share():
    full = dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=4)
    shot = dirichlet_partition(TRAIN, TEST, num_clients=10, beta=0.5, seed=4, shots=2)
    for a, b in zip(full.clients, shot.clients):
        assert set(b.train_indices) <= set(a.train_indices)
        counts = Counter(TRAIN[i] for i in b.train_indices)
        full_counts = Counter(TRAIN[i] for i in a.train_indices)
        assert all(counts[c] == min(2, full_counts[c]) for c in full_counts)
        assert b.test_indices == a.test_indices


DOMAINS = ["amazon", "caltech", "dslr", "webcam"]


def _domain_data():
    rng = random.Random(5)
    train_domains = [rng.choice(DOMAINS) for _ in range(1200)]
    test_domains = [rng.choice(DOMAINS) for _ in range(400)]
    return _labels(1200, 10, 2), _labels(400, 10, 3), train_domains, test_domains


def test_domain_partition_keeps_clients_inside_their_domain():
    train, test, train_dom, test_dom = _domain_data()
    partition = domain_partition(
        train, test, train_dom, test_dom, clients_per_domain=3, beta=0.5, seed=1, domain_names=DOMAINS
    )
    assert partition.protocol == "domains" and len(partition.clients) == 12
    assert [c.domain for c in partition.clients] == [d for d in DOMAINS for _ in range(3)]
    assert [c.client_id for c in partition.clients] == list(range(12))
    for client in partition.clients:
        assert {train_dom[i] for i in client.train_indices} == {client.domain}
        assert {test_dom[i] for i in client.test_indices} <= {client.domain}
        assert client.num_samples >= 2 and client.class_ids == tuple(range(10))
    assert sorted(i for c in partition.clients for i in c.train_indices) == list(range(len(train)))
    assert sorted(i for c in partition.clients for i in c.test_indices) == list(range(len(test)))
    again = domain_partition(train, test, train_dom, test_dom, 3, 0.5, 1, domain_names=DOMAINS)
    assert again.hash == partition.hash
    assert domain_partition(train, test, train_dom, test_dom, 3, 0.5, 2, domain_names=DOMAINS).hash != partition.hash


def test_domain_partition_is_label_skewed_within_domains():
    train, test, train_dom, test_dom = _domain_data()
    skewed = domain_partition(train, test, train_dom, test_dom, 3, beta=0.1, seed=1)
    flat = domain_partition(train, test, train_dom, test_dom, 3, beta=100.0, seed=1)
    assert _mean_entropy(skewed, train) < _mean_entropy(flat, train)


# --- the dirichlet and domains protocols, end to end with zero-shot CLIP on fake data ----


def _recording_accuracy(calls):
    def accuracy(indices, class_ids):
        calls.append((tuple(indices), tuple(class_ids)))
        return float(len(calls))

    return accuracy


@pytest.mark.parametrize(
    "dataset, protocol, clients, columns",
    [
        ("cifar10", "dirichlet", 3, ["Acc"]),
        ("office_caltech10", "domains", 8, ["amazon", "caltech", "dslr", "webcam", "Avg"]),
    ],
)
def test_zero_shot_runs_each_protocol_and_prints_its_table(tmp_path, dataset, protocol, clients, columns):
    from conftest import client_metrics_with, tiny_config
    from fake_layouts import make_fake_dataset

    from benchmark.protocol_registry import get_protocol
    from benchmark.runs.reporting import format_summary
    from benchmark.runs.runner import run_experiment

    make_fake_dataset(dataset, tmp_path / "data", num_classes=3, per_class=8)
    config = tiny_config(
        tmp_path / "data",
        tmp_path,
        dataset=dataset,
        protocol=protocol,
        method="zeroshot",
        clients=clients,
        shots=0,
        rounds=1,
        beta=0.5,
    )
    result = run_experiment(config, progress=False)
    metrics = result.summary["metrics"]
    assert list(metrics) == columns
    assert all(0.0 <= v <= 100.0 for v in metrics.values())
    table = format_summary(result.summary)
    assert all(column in table for column in columns) and "| zeroshot" in table
    assert (result.run_dir / "partition.json").is_file()

    # each client is scored on its own test shard, over all classes
    from data.catalog import load_dataset
    from data.transforms import clip_transforms

    splits = load_dataset(dataset, tmp_path / "data", clip_transforms(32, augment=False))
    protocol_obj = get_protocol(protocol)
    partition = protocol_obj.partition(splits, config)
    assert partition.hash == result.summary["partition_hash"]
    for client in partition.clients:
        calls = []
        client_metrics_with(_recording_accuracy(calls), protocol_obj, client, partition, splits)
        assert calls == [(client.test_indices, (0, 1, 2))]
    if protocol == "domains":
        assert [c.domain for c in partition.clients] == [d for d in splits.domain_names for _ in range(2)]
        per_client = {c.client_id: {"Acc": float(c.client_id)} for c in partition.clients}
        summary = protocol_obj.summarize(per_client, partition)
        assert summary["amazon"] == 0.5 and summary["webcam"] == 6.5 and summary["Avg"] == 3.5


def test_domains_protocol_config_errors(tmp_path):
    from conftest import tiny_config
    from fake_layouts import make_fake_dataset

    from benchmark.config import ConfigError
    from benchmark.protocol_registry import get_protocol
    from data.catalog import load_dataset
    from data.transforms import clip_transforms

    make_fake_dataset("office_caltech10", tmp_path, num_classes=2, per_class=4)
    make_fake_dataset("dtd", tmp_path, num_classes=2, per_class=4)
    transforms = clip_transforms(32, augment=False)
    office = load_dataset("office_caltech10", tmp_path, transforms)
    with pytest.raises(ConfigError, match="multiple of 4"):
        get_protocol("domains").partition(office, tiny_config(tmp_path, tmp_path, clients=10))
    with pytest.raises(ConfigError, match="feature-shift"):
        get_protocol("domains").partition(
            load_dataset("dtd", tmp_path, transforms), tiny_config(tmp_path, tmp_path, clients=4)
        )


# -- pathological (k classes per client) and the partition figure (issue 37 item 6) -------


def test_pathological_gives_each_client_k_classes_with_overlap_and_every_image_once():
    from data.partition import pathological_partition

    labels = [c for c in range(5) for _ in range(12)]
    partition = pathological_partition(labels, labels[:30], num_clients=8, classes_per_client=2, seed=3)
    assert [len(c.class_ids) for c in partition.clients] == [2] * 8
    assert all(c.client_id % 5 in c.class_ids for c in partition.clients)  # client i holds class i mod C
    assert sum(len(c.class_ids) for c in partition.clients) > 5  # 8 x 2 > 5 classes: clients share classes
    dealt = sorted(i for c in partition.clients for i in c.train_indices)
    held = {k for c in partition.clients for k in c.class_ids}
    assert dealt == [i for i, label in enumerate(labels) if label in held]  # each held class's images once
    for client in partition.clients:
        assert {labels[i] for i in client.train_indices} == set(client.class_ids)
        assert {labels[i] for i in client.test_indices} <= set(client.class_ids)
    assert partition == pathological_partition(labels, labels[:30], 8, 2, seed=3)
    assert partition.hash != pathological_partition(labels, labels[:30], 8, 2, seed=4).hash
    with pytest.raises(ValueError, match="classes_per_client = 6 must be between 1 and the 5 classes"):
        pathological_partition(labels, labels, 2, 6, seed=1)


@pytest.mark.parametrize(
    "protocol, options",
    [("dirichlet", ["--beta", "0.2"]), ("pathological", ["--classes-per-client", "2"])],
)
def test_partition_command_draws_a_coop_dataset_reproducibly(fedbench, tmp_path, protocol, options):
    """`fedbench partition` on a CoOp-layout dataset (Oxford Pets, split_zhou): the counts
    as CSV and figure; the same seed gives the same partition, another seed another."""
    import matplotlib.image
    from fake_layouts import make_fake_dataset

    make_fake_dataset("oxford_pets", tmp_path / "data", num_classes=6, per_class=8)

    def partition(seed: int, name: str) -> list[list[int]]:
        args = ["partition", "oxford_pets", "--protocol", protocol, *options, "--clients", 3, "--shots", 0]
        done = fedbench(*args, "--seed", seed, "--data-root", tmp_path / "data", "--plot", tmp_path / f"{name}.png",
                        "--csv", tmp_path / f"{name}.csv")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert f"{protocol} on oxford_pets" in done.stdout and "3 clients" in done.stdout
        rows = (tmp_path / f"{name}.csv").read_text().splitlines()
        assert rows[0].split(",")[0] == "client" and len(rows[0].split(",")) == 1 + 6  # one column per class
        return [[int(v) for v in row.split(",")[1:]] for row in rows[1:]]

    first, again, other = partition(1, "a"), partition(1, "b"), partition(2, "c")
    assert first == again and first != other
    assert len(first) == 3 and all(sum(row) > 0 for row in first)
    if protocol == "pathological":
        assert all(sum(1 for v in row if v) == 2 for row in first)  # two classes each
    figure = matplotlib.image.imread(tmp_path / "a.png")
    assert figure.ndim == 3 and figure.shape[0] > 50 and figure.shape[1] > 50


def test_zero_shot_runs_the_pathological_protocol_and_keeps_its_partition(tmp_path):
    from conftest import tiny_config
    from fake_layouts import make_fake_dataset

    from benchmark.runs.runner import run_experiment

    make_fake_dataset("oxford_pets", tmp_path / "data", num_classes=6, per_class=8)
    config = tiny_config(
        tmp_path / "data", tmp_path, dataset="oxford_pets", protocol="pathological", method="zeroshot",
        clients=3, shots=0, rounds=1, classes_per_client=2,
    )  # fmt: skip
    result = run_experiment(config, progress=False)
    assert list(result.summary["metrics"]) == ["Acc"] and 0.0 <= result.summary["metrics"]["Acc"] <= 100.0
    rows = (result.run_dir / "partition.csv").read_text().splitlines()[1:]
    assert [sum(1 for v in row.split(",")[1:] if int(v)) for row in rows] == [2, 2, 2]
    assert (result.run_dir / "partition.png").stat().st_size > 0


def test_a_protocol_declaration_is_checked_at_registration():
    from benchmark.config import ConfigError
    from benchmark.protocol import Option, Protocol, register_protocol
    from benchmark.protocol_registry import available_protocols

    class Bad(Protocol):
        metrics, headline = ("Acc",), "Acc"
        options = {"k": Option(int, 0, "a count", ge=1)}

    with pytest.raises(ConfigError, match="k = 0 is invalid: expected an integer >= 1"):
        register_protocol("bad_default")(Bad)

    class NoHeadline(Protocol):
        metrics, headline = ("Acc",), "HM"

    with pytest.raises(ValueError, match="headline 'HM' must be one of its metrics"):
        register_protocol("no_headline")(NoHeadline)
    assert not {"bad_default", "no_headline"} & set(available_protocols())


def test_too_many_clients_names_the_flags_to_change():
    """Issue 50, item 10: the error named `min_size`, a name no flag has (--min-client-size)."""
    from data.partition import dirichlet_partition

    with pytest.raises(ValueError, match=r"use fewer clients \(--clients\) or a smaller --min-client-size"):
        dirichlet_partition([0, 1] * 10, [0, 1], num_clients=5000, beta=0.5, seed=1)
