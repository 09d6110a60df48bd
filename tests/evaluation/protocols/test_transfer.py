"""benchmark/evaluation/protocols/transfer.py (moved from tests/data/test_combined.py)."""

from __future__ import annotations

import pytest
from protocol_fakes import TRANSFORMS, Recorder, _evaluate, _fake

from benchmark.config import build_config
from benchmark.protocol_registry import get_protocol
from data.combined import combine, members_of


def test_transfer_scores_each_test_dataset_over_its_own_classes_and_averages_the_unseen():
    imagenet = _fake("imagenet", 30)
    variant_a = _fake("imagenet_a", 6)  # the -A / -R variants: a class list of their own
    variant_v2 = _fake("imagenet_v2", 30)
    dataset = combine("imagenet+imagenet_v2+imagenet_a", [imagenet], [variant_v2, variant_a])
    config = build_config(
        {
            "dataset": "imagenet",
            "protocol": "transfer",
            "classes_per_client": 5,
            "shots": 1,
            "eval_datasets": "imagenet_v2+imagenet_a+imagenet",
        }
    )
    protocol = get_protocol("transfer")
    protocol.check(config)
    partition = protocol.partition(dataset, config)
    assert len(partition.clients) == 6 and {c.domain for c in partition.clients} == {"imagenet"}
    score = {30: 70.0, 6: 40.0, 5: 90.0}  # by the number of candidate classes: IN and V2, A, a client
    recorder = Recorder(lambda indices, class_ids: score[len(class_ids)])
    _, summary = _evaluate(protocol, dataset, partition, recorder)
    members = {m.name: m for m in members_of(dataset)}
    calls = {class_ids: indices for indices, class_ids in recorder.calls}
    a = members["imagenet_a"]
    assert calls[a.class_ids] == list(a.test_indices) and len(a.class_ids) == 6  # 6-way, its own images
    assert calls[members["imagenet"].class_ids] == list(members["imagenet"].test_indices)
    assert summary["imagenet_v2"] == 70.0 and summary["imagenet_a"] == 40.0 and summary["imagenet"] == 70.0
    assert summary["Avg"] == pytest.approx(55.0)  # V2 and A only: ImageNet itself is not averaged in
    assert summary["Local"] == 90.0


def test_transfer_on_imagenet_layouts_scores_each_variant_over_its_own_class_list(tmp_path):
    from fake_layouts import make_fake_dataset

    from data.combined import load_datasets

    fakes = {
        name: make_fake_dataset(name, tmp_path, num_classes=n, per_class=2)
        for name, n in (("imagenet", 6), ("imagenet_v2", 6), ("imagenet_a", 3), ("imagenet_r", 2))
    }
    config = build_config(
        {
            "dataset": "imagenet",
            "protocol": "transfer",
            "classes_per_client": 2,
            "shots": 1,
            "eval_datasets": "imagenet+imagenet_v2+imagenet_a+imagenet_r",
        }
    )
    protocol = get_protocol("transfer")
    protocol.check(config)
    dataset = load_datasets(config.datasets, tmp_path, TRANSFORMS, config.test_datasets)
    members = {m.name: m for m in members_of(dataset)}
    assert [m.trains for m in members.values()] == [True, False, False, False]
    for name, fake in fakes.items():  # each classified over its own list: A and R are not ImageNet's 6
        assert [dataset.class_names[k] for k in members[name].class_ids] == fake.class_names
    partition = protocol.partition(dataset, config)
    assert len(partition.clients) == 3 and all(len(c.class_ids) == 2 for c in partition.clients)
    recorder = Recorder(lambda indices, class_ids: 100.0 * len(class_ids))
    _, summary = _evaluate(protocol, dataset, partition, recorder)
    assert summary["imagenet_a"] == 300.0 and summary["imagenet_r"] == 200.0 and summary["imagenet"] == 600.0
    assert summary["Avg"] == pytest.approx((600 + 300 + 200) / 3)  # V2, A, R; not ImageNet
    for indices, class_ids in recorder.calls:
        assert {dataset.test.labels[i] for i in indices} <= set(class_ids)
