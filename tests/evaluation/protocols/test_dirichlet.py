"""benchmark/evaluation/protocols/dirichlet.py: Dirichlet(beta) label shift; each client's
model on its own test shard over every class; Acc skips clients whose shard is empty."""

from __future__ import annotations

import math

import pytest
from protocol_fakes import Recorder, _evaluate, _fake

from benchmark.config import build_config
from benchmark.protocol_registry import get_protocol
from data.partition import Partition


def _config(**options):
    return build_config({"dataset": "eurosat", "protocol": "dirichlet", "clients": 4, "shots": 0, **options})


def test_each_client_is_scored_on_its_own_shard_over_every_class():
    dataset = _fake("eurosat", 10, train_per_class=8, test_per_class=4)
    protocol = get_protocol("dirichlet")
    partition = protocol.partition(dataset, _config(beta=0.3))
    recorder = Recorder(lambda indices, class_ids: float(len(indices)))
    per_client, summary = _evaluate(protocol, dataset, partition, recorder)
    for client, (indices, class_ids) in zip(partition.clients, recorder.calls):
        assert indices == list(client.test_indices) and class_ids == tuple(range(10))
    assert summary == {"Acc": pytest.approx(sum(len(c.test_indices) for c in partition.clients) / 4)}


def test_min_client_size_holds_for_every_client():
    dataset = _fake("eurosat", 10, train_per_class=8)
    partition = get_protocol("dirichlet").partition(dataset, _config(beta=0.1, min_client_size=12))
    assert min(c.num_samples for c in partition.clients) >= 12


def test_acc_is_the_mean_over_clients_with_a_test_shard():
    partition = Partition("dirichlet", ())
    summary = get_protocol("dirichlet").summarize({0: {"Acc": 50.0}, 1: {"Acc": math.nan}, 2: {"Acc": 70.0}}, partition)
    assert summary == {"Acc": 60.0}
