"""What several built-in protocols share: a mean that skips empty test shards, and the
class-chunk federations' partition, planned client count and per-group means."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Iterable

from benchmark.errors import ConfigError
from data.catalog import dataset_info
from data.partition import Partition, class_chunk_partition

if TYPE_CHECKING:
    from data.base import DatasetSplits
    from data.combined import Member


def mean(values: Iterable[float]) -> float:
    """numpy's mean (its pairwise summation: the tables' numbers were made with it)."""
    import numpy as np  # lazy: the registry imports the protocols for `fedbench --help`, which stays without numpy

    return float(np.mean(list(values)))


def nanmean(values: Iterable[float]) -> float:
    """Mean ignoring clients whose test shard is empty (their accuracy is NaN)."""
    values = [v for v in values if not math.isnan(v)]
    return mean(values) if values else float("nan")


def member_named(dataset: DatasetSplits, name: str) -> Member:
    from data.combined import members_of  # lazy: data.combined loads torch, the registry must not

    return next(m for m in members_of(dataset) if m.name == name)


def chunk_partition(dataset, config, protocol: str, groups, **kwargs) -> Partition:
    try:
        return class_chunk_partition(
            dataset.train.labels,
            groups,
            config.protocol_args["classes_per_client"],
            config.shots,
            config.seed,
            protocol,
            **kwargs,
        )
    except ValueError as exc:
        raise ConfigError(f"{protocol} protocol on {dataset.name}: {exc}") from None


def planned_chunks(names, classes_of: Callable) -> int | None:
    """Client count of a class-chunk federation from the catalog's class counts."""
    total = 0
    for name in names:
        info = dataset_info(name)
        if not info.num_classes:
            return None
        total += classes_of(info)
    return total


def mean_by_group(per_client: dict[int, dict[str, float]], partition: Partition, metric: str) -> dict[str, float]:
    """Unweighted mean of `metric` over each group's (dataset's or domain's) clients."""
    groups: dict[str, list[float]] = {}
    for client in partition.clients:
        if client.client_id in per_client:
            groups.setdefault(client.domain, []).append(per_client[client.client_id][metric])
    return {group: mean(values) for group, values in groups.items()}
