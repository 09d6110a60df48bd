"""Protocols: how a dataset is split across clients and which metrics a run reports.

`@register_protocol("base2novel")` on a `Protocol` subclass is the one way to add one.
A protocol partitions (pure function of labels and seed) and scores one client at a time
through an `AccuracyFn` bound to that client's personalized model; `summarize` turns the
per-client metrics into the run's headline numbers.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from benchmark.config import ConfigError, RunConfig
from benchmark.evaluation import AccuracyFn, harmonic_mean, indices_of_classes
from data.base import DatasetSplits
from data.partition import ClientShard, Partition, base2novel_partition

PROTOCOLS: dict[str, type["Protocol"]] = {}


def register_protocol(name: str) -> Callable[[type["Protocol"]], type["Protocol"]]:
    def decorate(cls: type[Protocol]) -> type[Protocol]:
        cls.name = name
        PROTOCOLS[name] = cls
        return cls

    return decorate


def get_protocol(name: str) -> "Protocol":
    if name not in PROTOCOLS:
        raise ConfigError(f"unknown protocol {name!r}; choose one of: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]()


class Protocol:
    name: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()  # the headline metrics, in table order

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        raise NotImplementedError

    def client_metrics(
        self, accuracy: AccuracyFn, client: ClientShard, partition: Partition, dataset: DatasetSplits
    ) -> dict[str, float]:
        raise NotImplementedError

    def summarize(self, per_client: dict[int, dict[str, float]], partition: Partition) -> dict[str, float]:
        """Unweighted mean over clients of each client metric."""
        names = next(iter(per_client.values())).keys()
        return {m: float(np.mean([v[m] for v in per_client.values()])) for m in names}


@register_protocol("base2novel")
class Base2Novel(Protocol):
    """Base classes dealt to clients; Local / Base / Novel / HM (DESIGN.md)."""

    metrics = ("Local", "Base", "Novel", "HM")

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        return base2novel_partition(
            dataset.train.labels, len(dataset.class_names), config.clients, config.shots, config.seed
        )

    def client_metrics(self, accuracy, client, partition, dataset):
        labels = dataset.test.labels
        base, novel = partition.base_class_ids, partition.novel_class_ids
        return {
            # Local: the client's own classes' test images, classified over all base classes.
            "Local": accuracy(indices_of_classes(labels, client.class_ids), base),
            "Base": accuracy(indices_of_classes(labels, base), base),
            "Novel": accuracy(indices_of_classes(labels, novel), novel),
        }

    def summarize(self, per_client, partition):
        summary = super().summarize(per_client, partition)
        summary["HM"] = harmonic_mean(summary["Local"], summary["Base"], summary["Novel"])
        return summary
