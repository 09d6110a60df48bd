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


def _nanmean(values) -> float:
    """Mean ignoring clients whose test shard is empty (their accuracy is NaN)."""
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else float("nan")


@register_protocol("dirichlet")
class DirichletLabelShift(Protocol):
    """CIFAR protocol: Dirichlet(beta) label shift over `clients`; each client's
    personalized model on its own test shard (same class proportions as its train share),
    classifying over all classes; Acc = mean over clients."""

    metrics = ("Acc",)

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        from data.partition import dirichlet_partition

        try:
            return dirichlet_partition(
                dataset.train.labels, dataset.test.labels, config.clients, config.beta, config.seed,
                min_size=config.min_client_size, shots=config.shots, num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"dirichlet protocol on {dataset.name}: {exc}") from None

    def client_metrics(self, accuracy, client, partition, dataset):
        return {"Acc": accuracy(client.test_indices or (), client.class_ids)}

    def summarize(self, per_client, partition):
        return {"Acc": _nanmean(m["Acc"] for m in per_client.values())}


@register_protocol("domains")
class DomainFeatureShift(Protocol):
    """DomainNet / Office-Caltech10: `clients` split evenly over the domains, each domain's
    clients get a Dirichlet(beta) split of its classes. Each client is scored on its own
    test shard over all classes; the table shows each domain's mean over its clients and
    Avg, the unweighted mean over domains."""

    metrics = ("Avg",)  # plus one column per domain, named after it

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        from data.partition import domain_partition

        domains = dataset.domain_names
        if not domains or dataset.train.domains is None or dataset.test.domains is None:
            raise ConfigError(
                f"the domains protocol needs a feature-shift dataset with per-image domains "
                f"(domainnet, office_caltech10); {dataset.name} has none. Use --protocol base2novel or dirichlet."
            )
        if config.clients % len(domains):
            raise ConfigError(
                f"clients = {config.clients} cannot be split evenly over the {len(domains)} domains of "
                f"{dataset.name} ({', '.join(domains)}); use a multiple of {len(domains)}, e.g. "
                f"--clients {len(domains) * max(1, round(config.clients / len(domains)))}"
            )
        try:
            return domain_partition(
                dataset.train.labels, dataset.test.labels, dataset.train.domains, dataset.test.domains,
                config.clients // len(domains), config.beta, config.seed, min_size=config.min_client_size,
                shots=config.shots, domain_names=domains, num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"domains protocol on {dataset.name}: {exc}") from None

    def client_metrics(self, accuracy, client, partition, dataset):
        return {"Acc": accuracy(client.test_indices or (), client.class_ids)}

    def summarize(self, per_client, partition):
        by_domain: dict[str, list[float]] = {}
        for client in partition.clients:  # partition order = domain order
            if client.client_id in per_client:
                by_domain.setdefault(client.domain, []).append(per_client[client.client_id]["Acc"])
        summary = {domain: _nanmean(values) for domain, values in by_domain.items()}
        summary["Avg"] = _nanmean(summary.values())
        return summary
