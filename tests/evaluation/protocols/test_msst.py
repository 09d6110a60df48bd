"""benchmark/evaluation/protocols/msst.py (moved from tests/data/test_combined.py)."""

from __future__ import annotations

import pytest
from protocol_fakes import TRANSFORMS, Recorder, _evaluate, _fake

from benchmark.config import ConfigError, build_config
from benchmark.protocol_registry import get_protocol

DOMAINS = ["art", "cartoon", "photo", "sketch"]


def test_msst_trains_on_the_sources_and_scores_the_target_over_all_classes():
    dataset = _fake("pacs", 7, domains=DOMAINS)
    protocol = get_protocol("msst")
    config = build_config({"dataset": "pacs", "protocol": "msst", "shots": 2})
    partition = protocol.partition(dataset, config)  # the fixed target: sketch
    assert [c.domain for c in partition.clients] == ["art", "cartoon", "photo"] and partition.targets == ("sketch",)
    assert all(c.class_ids == tuple(range(7)) for c in partition.clients)
    recorder = Recorder(lambda indices, class_ids: 50.0)
    _, summary = _evaluate(protocol, dataset, partition, recorder)
    for indices, class_ids in recorder.calls:
        assert {dataset.test.domains[i] for i in indices} == {"sketch"} and class_ids == tuple(range(7))
        assert len(indices) == 7 * 2
    assert summary == {"Acc": 50.0}
    photo = protocol.partition(dataset, build_config({"dataset": "pacs", "protocol": "msst", "target": "photo"}))
    assert [c.domain for c in photo.clients] == ["art", "cartoon", "sketch"]
    with pytest.raises(ConfigError, match="'painting' is not one of its domains"):
        protocol.partition(dataset, build_config({"dataset": "pacs", "protocol": "msst", "target": "painting"}))


@pytest.mark.parametrize("name", ["pacs", "office_home", "terra_incognita"])
def test_msst_on_domainbed_layouts_holds_out_the_fixed_target(name, tmp_path):
    from fake_layouts import make_fake_dataset

    from benchmark.evaluation.protocols.msst import FIXED_TARGETS
    from data.catalog import dataset_info
    from data.combined import load_datasets

    make_fake_dataset(name, tmp_path, num_classes=5)
    with pytest.warns(UserWarning, match="no published split"):  # the suite writes its split
        dataset = load_datasets([name], tmp_path, TRANSFORMS)
    assert tuple(dataset.domain_names) == dataset_info(name).domains
    config = build_config({"dataset": name, "protocol": "msst", "classes_per_client": 2, "shots": 3})
    get_protocol("msst").check(config)
    partition = get_protocol("msst").partition(dataset, config)
    target = FIXED_TARGETS[name]
    sources = [d for d in dataset.domain_names if d != target]
    assert partition.targets == (target,)
    assert [c.domain for c in partition.clients] == [d for d in sources for _ in range(2)]  # 5 classes -> [2, 3]
    assert [len(c.class_ids) for c in partition.clients[:2]] == [2, 3]
    for client in partition.clients:
        assert {dataset.train.domains[i] for i in client.train_indices} == {client.domain}
    recorder = Recorder(lambda indices, class_ids: 42.0)
    _, summary = _evaluate(get_protocol("msst"), dataset, partition, recorder)
    indices, class_ids = recorder.calls[0]
    assert {dataset.test.domains[i] for i in indices} == {target} and class_ids == tuple(range(5))
    assert summary == {"Acc": 42.0}
