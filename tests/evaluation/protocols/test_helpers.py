"""benchmark/evaluation/protocols/helpers.py: the means the protocols share and the
class-chunk federations' planned client count."""

from __future__ import annotations

import math

from conftest import tiny_config

from benchmark.evaluation.protocols.helpers import mean, mean_by_group, nanmean, planned_chunks
from benchmark.protocol_registry import get_protocol
from data.partition import ClientShard, Partition, chunk_count


def test_nanmean_skips_empty_shards_and_is_nan_when_all_are():
    assert nanmean([10.0, math.nan, 20.0]) == 15.0
    assert math.isnan(nanmean([math.nan])) and math.isnan(nanmean([]))
    assert mean([1.0, 2.0, 4.0]) == 7 / 3


def test_mean_by_group_averages_the_scored_clients_of_each_group():
    clients = tuple(ClientShard(i, (i,), (0,), domain=d) for i, d in enumerate(["a", "a", "b", "c"]))
    per_client = {0: {"Acc": 10.0}, 1: {"Acc": 30.0}, 2: {"Acc": 50.0}}  # client 3 was not scored
    assert mean_by_group(per_client, Partition("x", clients), "Acc") == {"a": 20.0, "b": 50.0}


def test_planned_chunks_counts_from_the_catalog(tmp_path):
    assert planned_chunks(["dtd", "oxford_pets"], lambda info: chunk_count(info.num_classes, 10)) == 5 + 4
    config = tiny_config(tmp_path, tmp_path, protocol="classchunk", dataset="dtd+oxford_pets", classes_per_client=10)
    assert get_protocol("classchunk").planned_clients(config) == chunk_count(24, 10) + chunk_count(19, 10)
