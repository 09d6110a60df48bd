"""benchmark/evaluation/protocols/domains.py: clients split evenly over the domains; each
domain's column is the mean over its clients, Avg the unweighted mean over domains."""

from __future__ import annotations

import pytest
from protocol_fakes import _fake

from benchmark.config import ConfigError, build_config
from benchmark.protocol_registry import get_protocol

DOMAINS = ["amazon", "caltech", "dslr", "webcam"]


def _partition(clients: int):
    dataset = _fake("office_caltech10", 10, train_per_class=4, domains=DOMAINS)
    config = build_config(
        {"dataset": "office_caltech10", "protocol": "domains", "clients": clients, "shots": 0, "min_client_size": 1}
    )
    return dataset, get_protocol("domains").partition(dataset, config)


def test_clients_are_numbered_domain_by_domain_and_keep_to_their_domain():
    dataset, partition = _partition(8)
    assert [c.domain for c in partition.clients] == [d for d in DOMAINS for _ in range(2)]
    for client in partition.clients:
        assert {dataset.test.domains[i] for i in client.test_indices} <= {client.domain}
        assert client.class_ids == tuple(range(10))  # scored over every class


def test_avg_is_unweighted_over_domains_not_clients():
    _, partition = _partition(8)
    scores = {c.client_id: {"Acc": 10.0 * (c.client_id + 1)} for c in partition.clients}
    summary = get_protocol("domains").summarize(scores, partition)
    assert summary == {"amazon": 15.0, "caltech": 35.0, "dslr": 55.0, "webcam": 75.0, "Avg": 45.0}
    del scores[0], scores[1]  # a domain none of whose clients was scored drops out
    assert "amazon" not in get_protocol("domains").summarize(scores, partition)


def test_clients_that_do_not_divide_over_the_domains_are_refused_with_a_count_that_does():
    with pytest.raises(ConfigError, match="use a multiple of 4, e.g. --clients 8"):
        _partition(7)


def test_every_domain_is_trained():
    assert get_protocol("domains").trained_share(10, 4) == (10, 4)
