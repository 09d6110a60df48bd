"""benchmark/evaluation/protocols/classchunk.py (moved from tests/data/test_combined.py)."""

from __future__ import annotations

import pytest
from protocol_fakes import Recorder, _evaluate, _fake

from benchmark.config import build_config
from benchmark.protocol_registry import get_protocol
from data.combined import combine


def test_classchunk_local_base_new_per_dataset_then_equal_weights():
    # a: 10 classes, base 5 -> one client; b: 44 classes, base 22 -> two clients of 11 (P = 11)
    a, b = _fake("a", 10), _fake("b", 44)
    dataset = combine("a+b", [a, b])
    config = build_config({"dataset": "a+b", "protocol": "classchunk", "classes_per_client": 11, "shots": 2})
    protocol = get_protocol("classchunk")
    partition = protocol.partition(dataset, config)
    assert [(c.domain, c.class_ids) for c in partition.clients] == [
        ("a", tuple(range(5))),
        ("b", tuple(range(10, 21))),
        ("b", tuple(range(21, 32))),
    ]
    labels = dataset.test.labels

    # accuracy = 60 on a, 90 on b for Base; 40 / 70 for New; Local = first class id of the client
    def answer(indices, class_ids):
        in_b = class_ids[0] >= 10
        if len(class_ids) in (5, 22) and class_ids[0] in (0, 10):  # base sets
            return 90.0 if in_b else 60.0
        if len(class_ids) in (5, 22):  # new sets
            return 70.0 if in_b else 40.0
        return float(class_ids[0])

    recorder = Recorder(answer)
    per_client, summary = _evaluate(protocol, dataset, partition, recorder)
    for (indices, class_ids), client in zip(recorder.calls[0::3], partition.clients):  # the Local calls
        assert class_ids == client.class_ids  # the client's own classes only
        assert sorted(indices) == [i for i, y in enumerate(labels) if y in client.class_ids]
    base_b, new_b = recorder.calls[4], recorder.calls[5]
    assert base_b[1] == tuple(range(10, 32)) and {labels[i] for i in base_b[0]} == set(range(10, 32))
    assert new_b[1] == tuple(range(32, 54)) and {labels[i] for i in new_b[0]} == set(range(32, 54))
    # Local: a's one client holds all its base classes (60), b = mean(10, 21) = 15.5;
    # per dataset then over datasets: (60 + 15.5) / 2, not the client mean (60 + 10 + 21) / 3
    assert summary["Local"] == pytest.approx(37.75)
    assert summary["Base"] == pytest.approx(75.0) and summary["New"] == pytest.approx(55.0)
    hm = 3 / (1 / 37.75 + 1 / 75 + 1 / 55)
    assert summary["HM"] == pytest.approx(hm)
    details = protocol.details(per_client, partition)
    assert details["b/Local"] == pytest.approx(15.5) and details["a/Base"] == 60.0 and details["b/New"] == 70.0


def test_published_hm_is_the_harmonic_mean_of_the_three_averages():
    from benchmark.evaluation.requests import harmonic_mean

    # The published rows: HM of the rounded averages is within 0.01 of the published HM
    # (the three-way HM; the two-way 2BN/(B+N) of FedMVP would be 76.58).
    assert harmonic_mean(81.89, 75.37, 77.82) == pytest.approx(78.27, abs=0.01)  # FedMVP
    assert harmonic_mean(76.72, 70.51, 75.78) == pytest.approx(74.24, abs=0.01)  # zero-shot CLIP
    assert harmonic_mean(75.37, 77.82) == pytest.approx(76.58, abs=0.01)
