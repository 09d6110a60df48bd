"""benchmark/evaluation/protocols/base2novel.py: base classes dealt to clients; Local, Base and
Novel scored over the right images and candidate classes; HM of the three averages."""

from __future__ import annotations

import pytest
from protocol_fakes import Recorder, _evaluate, _fake

from benchmark.config import ConfigError, build_config
from benchmark.evaluation.requests import harmonic_mean
from benchmark.protocol_registry import get_protocol


def _config(**options):
    return build_config({"dataset": "dtd", "protocol": "base2novel", "shots": 2, **options})


@pytest.mark.parametrize("dealing, sizes", [("balanced", [4, 4, 4, 3, 3, 3, 3]), ("authors", [3] * 6 + [6])])
def test_class_dealing_sets_the_client_sizes_over_the_base_half(dealing, sizes):
    dataset = _fake("dtd", 47)
    partition = get_protocol("base2novel").partition(dataset, _config(clients=7, class_dealing=dealing))
    assert [len(c.class_ids) for c in partition.clients] == sizes
    assert partition.base_class_ids == tuple(range(24)) and partition.novel_class_ids == tuple(range(24, 47))
    assert all(c.train_classes == partition.base_class_ids for c in partition.clients)  # the authors' label space


def test_local_base_and_novel_score_their_own_images_and_candidates():
    dataset = _fake("dtd", 10, test_per_class=3)
    protocol = get_protocol("base2novel")
    partition = protocol.partition(dataset, _config(clients=2))
    labels = dataset.test.labels
    base, novel = tuple(range(5)), tuple(range(5, 10))
    score = {base: 80.0, novel: 40.0}
    recorder = Recorder(lambda indices, class_ids: score[class_ids] if len(indices) > 9 else 60.0 + len(indices))
    per_client, summary = _evaluate(protocol, dataset, partition, recorder)
    for client, (local, base_call, novel_call) in zip(partition.clients, zip(*[iter(recorder.calls)] * 3)):
        assert local[1] == base and {labels[i] for i in local[0]} == set(client.class_ids)  # own images, all base
        assert base_call == ([i for i, y in enumerate(labels) if y < 5], base)
        assert novel_call == ([i for i, y in enumerate(labels) if y >= 5], novel)
    local = [60.0 + 3 * len(c.class_ids) for c in partition.clients]  # 3 test images per own class
    assert summary["Local"] == pytest.approx(sum(local) / 2)
    assert summary["Base"] == 80.0 and summary["Novel"] == 40.0
    assert summary["HM"] == pytest.approx(harmonic_mean(summary["Local"], 80.0, 40.0))  # of the averages


def test_more_clients_than_base_classes_is_a_config_error_naming_the_counts_that_work():
    with pytest.raises(ConfigError, match=r"base2novel protocol on dtd: cannot deal 5 base classes to 6 clients"):
        get_protocol("base2novel").partition(_fake("dtd", 10), _config(clients=6))


def test_only_the_base_half_is_trained():
    assert get_protocol("base2novel").trained_share(47, 1) == (24, 1)
