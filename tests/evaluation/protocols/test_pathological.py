"""benchmark/evaluation/protocols/pathological.py: k classes per client; each client's model
on its own test shard (its classes' test images) over every class."""

from __future__ import annotations

from protocol_fakes import Recorder, _evaluate, _fake

from benchmark.config import build_config
from benchmark.protocol_registry import get_protocol


def test_each_client_holds_k_classes_and_is_scored_over_every_class():
    dataset = _fake("eurosat", 10, train_per_class=6, test_per_class=4)
    protocol = get_protocol("pathological")
    config = build_config(
        {"dataset": "eurosat", "protocol": "pathological", "clients": 5, "classes_per_client": 3, "shots": 0}
    )
    partition = protocol.partition(dataset, config)
    assert all(len(c.class_ids) == 3 and c.client_id % 10 in c.class_ids for c in partition.clients)
    recorder = Recorder(lambda indices, class_ids: 50.0)
    _, summary = _evaluate(protocol, dataset, partition, recorder)
    for client, (indices, class_ids) in zip(partition.clients, recorder.calls):
        assert indices == list(client.test_indices) and class_ids == tuple(range(10))
        assert {dataset.test.labels[i] for i in indices} <= set(client.class_ids)  # its own classes' images
    assert summary == {"Acc": 50.0}
