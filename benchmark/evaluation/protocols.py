"""Protocols: how a dataset is split across clients and which metrics a run reports.

`@register_protocol("base2novel")` on a `Protocol` subclass is the one way to add one.
`--protocol`'s help lists the registered names without importing this module (which loads
torch): `benchmark.cli.args.protocol_names` reads them from these decorators, so a protocol
is registered here, by the decorator on its class.
A protocol partitions (pure function of labels and seed), states what each client's
metrics need (`requests`: metric -> the test images and classes its accuracy is over), turns
the evaluator's scores into the client's metrics (`metrics_from`; the scores themselves by
default), and `summarize` turns the per-client metrics into the run's headline numbers. The
evaluator (`benchmark.evaluation.accuracy.Evaluator`) scores the requests, one client at a
time or many at once (batched evaluation), without the protocol knowing which.
"""

from __future__ import annotations

import math
from typing import Callable, ClassVar

import numpy as np

from benchmark.config import ConfigError, RunConfig
from benchmark.evaluation.accuracy import Request, harmonic_mean, indices_of_classes
from data.base import DatasetSplits
from data.catalog import dataset_info
from data.combined import Member, members_of
from data.partition import (
    ChunkGroup,
    ClientShard,
    Partition,
    base2novel_partition,
    base_novel_split,
    chunk_count,
    class_chunk_partition,
    dirichlet_partition,
    domain_partition,
)

PROTOCOLS: dict[str, type["Protocol"]] = {}


def register_protocol(name: str) -> Callable[[type["Protocol"]], type["Protocol"]]:
    def decorate(cls: type[Protocol]) -> type[Protocol]:
        if cls.headline not in cls.metrics:
            raise ValueError(f"protocol {name!r}: headline {cls.headline!r} must be one of its metrics {cls.metrics}")
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
    several_datasets: ClassVar[bool] = False  # whether `dataset` may name several ('a+b')
    uses_target: ClassVar[bool] = False  # whether the `target` option means something
    uses_eval_datasets: ClassVar[bool] = False  # whether the `eval_datasets` option does

    def check(self, config: RunConfig) -> None:
        """Reject options this protocol does not use, before any data is loaded."""
        if len(config.datasets) > 1 and not self.several_datasets:
            raise ConfigError(
                f"protocol {self.name} runs on one dataset, got dataset = {config.dataset!r}; "
                "federations over several datasets use --protocol classchunk (or transfer)"
            )
        if config.eval_datasets and not self.uses_eval_datasets:
            raise ConfigError(f"eval_datasets is used by --protocol transfer only, not {self.name}")
        if config.target and not self.uses_target:
            raise ConfigError(f"target is used by --protocol msst only, not {self.name}")

    def planned_clients(self, config: RunConfig) -> int | None:
        """How many clients a run will have, known before its data is loaded (None: unknown)."""
        return config.clients

    def details(self, per_client: dict[int, dict[str, float]], partition: Partition) -> dict[str, float]:
        """Numbers kept in the run folder beside the headline ones (per dataset, say)."""
        return {}

    headline: ClassVar[str] = ""  # the one metric that ranks methods (tuning selects on it)

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        raise NotImplementedError

    def requests(self, client: ClientShard, partition: Partition, dataset: DatasetSplits) -> dict[str, Request]:
        """What `client`'s metrics need: name -> the accuracy (test images, classes) scored
        under that name, with the client's personalized model."""
        raise NotImplementedError

    def metrics_from(
        self, scores: dict[str, float], client: ClientShard, partition: Partition, dataset: DatasetSplits
    ) -> dict[str, float]:
        """`client`'s metrics from the scores of its `requests` (by their names): the scores
        themselves unless the protocol combines them."""
        return dict(scores)

    def summarize(self, per_client: dict[int, dict[str, float]], partition: Partition) -> dict[str, float]:
        """Unweighted mean over clients of each client metric."""
        names = next(iter(per_client.values())).keys()
        return {m: float(np.mean([v[m] for v in per_client.values()])) for m in names}


@register_protocol("base2novel")
class Base2Novel(Protocol):
    """Base classes dealt to clients; Local / Base / Novel / HM (docs/protocols.md)."""

    metrics = ("Local", "Base", "Novel", "HM")
    headline = "HM"

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        try:
            return base2novel_partition(
                dataset.train.labels,
                len(dataset.class_names),
                config.clients,
                config.shots,
                config.seed,
                config.class_dealing,
            )
        except ValueError as exc:
            raise ConfigError(f"base2novel protocol on {dataset.name}: {exc}") from None

    def requests(self, client, partition, dataset):
        labels = dataset.test.labels
        base, novel = partition.base_class_ids, partition.novel_class_ids
        return {
            # Local: the client's own classes' test images, classified over all base classes.
            "Local": Request.of(indices_of_classes(labels, client.class_ids), base),
            "Base": Request.of(indices_of_classes(labels, base), base),
            "Novel": Request.of(indices_of_classes(labels, novel), novel),
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
    headline = "Acc"

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:

        try:
            return dirichlet_partition(
                dataset.train.labels,
                dataset.test.labels,
                config.clients,
                config.beta,
                config.seed,
                min_size=config.min_client_size,
                shots=config.shots,
                num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"dirichlet protocol on {dataset.name}: {exc}") from None

    def requests(self, client, partition, dataset):
        return {"Acc": Request.of(client.test_indices or (), client.class_ids)}

    def summarize(self, per_client, partition):
        return {"Acc": _nanmean(m["Acc"] for m in per_client.values())}


@register_protocol("domains")
class DomainFeatureShift(Protocol):
    """DomainNet / Office-Caltech10: `clients` split evenly over the domains, each domain's
    clients get a Dirichlet(beta) split of its classes. Each client is scored on its own
    test shard over all classes; the table shows each domain's mean over its clients and
    Avg, the unweighted mean over domains."""

    metrics = ("Avg",)  # plus one column per domain, named after it
    headline = "Avg"

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:

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
                dataset.train.labels,
                dataset.test.labels,
                dataset.train.domains,
                dataset.test.domains,
                config.clients // len(domains),
                config.beta,
                config.seed,
                min_size=config.min_client_size,
                shots=config.shots,
                domain_names=domains,
                num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"domains protocol on {dataset.name}: {exc}") from None

    def requests(self, client, partition, dataset):
        return {"Acc": Request.of(client.test_indices or (), client.class_ids)}

    def summarize(self, per_client, partition):
        by_domain: dict[str, list[float]] = {}
        for client in partition.clients:  # partition order = domain order
            if client.client_id in per_client:
                by_domain.setdefault(client.domain, []).append(per_client[client.client_id]["Acc"])
        summary = {domain: _nanmean(values) for domain, values in by_domain.items()}
        summary["Avg"] = _nanmean(summary.values())
        return summary


# ---------------------------------------------------------------------------------------
# Generalization of one federated model (the FedTPG / FedMVP harness). Clients hold
# contiguous blocks of `classes_per_client` classes of one dataset (or one source domain)
# and train over their own classes. Every metric is the mean over clients of the client's
# model; for methods whose clients share one global state (all of this family's methods)
# that is the global model, which the evaluator's memo scores once.


def _member(dataset: DatasetSplits, name: str) -> Member:
    return next(m for m in members_of(dataset) if m.name == name)


def _chunk_partition(dataset, config, protocol, groups, **kwargs) -> Partition:
    try:
        return class_chunk_partition(
            dataset.train.labels, groups, config.classes_per_client, config.shots, config.seed, protocol, **kwargs
        )
    except ValueError as exc:
        raise ConfigError(f"{protocol} protocol on {dataset.name}: {exc}") from None


def _planned_chunks(names, config: RunConfig, classes_of) -> int | None:
    """Client count of a class-chunk federation from the catalog's class counts."""

    total = 0
    for name in names:
        info = dataset_info(name)
        if not info.num_classes:
            return None
        total += classes_of(info)
    return total


def _by_group(per_client: dict[int, dict[str, float]], partition: Partition, metric: str) -> dict[str, float]:
    """Unweighted mean of `metric` over each group's (dataset's or domain's) clients."""
    groups: dict[str, list[float]] = {}
    for client in partition.clients:
        if client.client_id in per_client:
            groups.setdefault(client.domain, []).append(per_client[client.client_id][metric])
    return {group: float(np.mean(values)) for group, values in groups.items()}


@register_protocol("classchunk")
class ClassChunkBase2New(Protocol):
    """Base-to-new over one or several datasets ('a+b+c'): each dataset's base classes
    (the first ceil(C/2)) are dealt in contiguous blocks of `classes_per_client`, one client
    per block. Local: a client's test images over its own classes; Base / New: the dataset's
    base / new test images over its base / new classes only. Each is averaged over the
    dataset's clients, then over datasets with equal weights; HM of the three averages."""

    metrics = ("Local", "Base", "New", "HM")
    headline = "HM"
    several_datasets = True

    def planned_clients(self, config):

        base = lambda info: chunk_count(math.ceil(info.num_classes / 2), config.classes_per_client)  # noqa: E731
        return _planned_chunks(config.datasets, config, base)

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        groups, base_all, novel_all = [], [], []
        for member in members_of(dataset):
            base, novel = base_novel_split(member.num_classes)
            base_ids = [member.offset + c for c in base]
            groups.append(ChunkGroup(member.name, tuple(base_ids)))
            base_all += base_ids
            novel_all += [member.offset + c for c in novel]
        return _chunk_partition(dataset, config, self.name, groups, base_class_ids=base_all, novel_class_ids=novel_all)

    def requests(self, client, partition, dataset):
        member = _member(dataset, client.domain)
        labels = dataset.test.labels
        base, novel = base_novel_split(member.num_classes)
        base = [member.offset + c for c in base]
        novel = [member.offset + c for c in novel]
        among = member.test_indices
        return {
            "Local": Request.of(indices_of_classes(labels, client.class_ids, among), client.class_ids),
            "Base": Request.of(indices_of_classes(labels, base, among), base),
            "New": Request.of(indices_of_classes(labels, novel, among), novel),
        }

    def summarize(self, per_client, partition):
        summary = {
            m: float(np.mean(list(_by_group(per_client, partition, m).values()))) for m in ("Local", "Base", "New")
        }
        summary["HM"] = harmonic_mean(summary["Local"], summary["Base"], summary["New"])
        return summary

    def details(self, per_client, partition):
        return {
            f"{group}/{metric}": value
            for metric in ("Local", "Base", "New")
            for group, value in _by_group(per_client, partition, metric).items()
        }


# The authors' one multi-source single-target configuration per dataset: this target
# domain, every other domain a source.
FIXED_TARGETS = {
    "pacs": "sketch",
    "office_home": "realworld",
    "vlcs": "sun",
    "terra_incognita": "L100",
    "domainnet_full": "sketch",
    "toy_domains": "tinted",  # the toy analogue: the held-out style zero-shot finds hardest (results/toy/calibration.md)
}


def msst_targets(dataset: str, targets) -> list[str]:
    """The target domains of a preset's msst cells: 'fixed' (the authors' one target),
    'lodo' (every domain in turn, as the catalog lists them: leave-one-domain-out) or a list."""

    if isinstance(targets, (list, tuple)):
        return [str(t) for t in targets]
    if targets not in ("fixed", "lodo"):
        raise ConfigError(f"targets = {targets!r} is invalid: expected fixed, lodo or a list of domains")
    domains = list(dataset_info(dataset).domains)
    if not domains:
        raise ConfigError(
            f"targets: {targets} needs a multi-domain dataset; the catalog lists no domains for {dataset}"
        )
    if targets == "lodo":
        return domains
    if dataset not in FIXED_TARGETS:
        raise ConfigError(f"no fixed target is known for {dataset}; use targets: lodo or a list of domains")
    return [FIXED_TARGETS[dataset]]


@register_protocol("msst")
class MultiSourceSingleTarget(Protocol):
    """Domain generalization: clients = (source domain x block of `classes_per_client`
    classes), every class of the dataset; one held-out `target` domain (default: the
    authors' fixed target) is scored on its test images over all classes. Leave-one-domain-
    out = one run per target, averaged unweighted by the table (preset `targets: lodo`)."""

    metrics = ("Acc",)
    headline = "Acc"
    uses_target = True

    def planned_clients(self, config):

        per_source = lambda info: (len(info.domains) - 1) * chunk_count(info.num_classes, config.classes_per_client)  # noqa: E731
        return _planned_chunks(config.datasets, config, per_source)

    def check(self, config: RunConfig) -> None:
        super().check(config)
        if not config.target and config.dataset not in FIXED_TARGETS:
            raise ConfigError(
                f"msst protocol on {config.dataset}: no fixed target domain is known for it; "
                "name the held-out domain with --target DOMAIN"
            )

    @staticmethod
    def target_of(dataset: DatasetSplits, config: RunConfig) -> str:
        target = config.target or FIXED_TARGETS.get(dataset.name, "")
        domains = dataset.domain_names or []
        if target not in domains:
            raise ConfigError(
                f"msst protocol on {dataset.name}: target domain {target!r} is not one of its domains "
                f"({', '.join(domains) or 'none: it is not a multi-domain dataset'}); set --target"
            )
        return target

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        if not dataset.domain_names or dataset.train.domains is None or dataset.test.domains is None:
            raise ConfigError(
                f"the msst protocol needs a dataset with per-image domains (pacs, office_home, vlcs, "
                f"terra_incognita, toy_domains, ...); {dataset.name} has none"
            )
        target = self.target_of(dataset, config)
        all_classes = tuple(range(len(dataset.class_names)))
        groups = []
        for domain in dataset.domain_names:
            if domain != target:
                pool = tuple(i for i, d in enumerate(dataset.train.domains) if d == domain)
                groups.append(ChunkGroup(domain, all_classes, pool))
        return _chunk_partition(dataset, config, self.name, groups, targets=(target,))

    def requests(self, client, partition, dataset):
        (target,) = partition.targets
        indices = [i for i, d in enumerate(dataset.test.domains) if d == target]
        if not indices:
            raise ConfigError(f"msst protocol on {dataset.name}: target domain {target} has no test images")
        return {"Acc": Request.of(indices, range(len(dataset.class_names)))}


@register_protocol("transfer")
class Transfer(Protocol):
    """Train on `dataset` (every class, blocks of `classes_per_client` per client; usually
    ImageNet with participation < 1), then score each of `eval_datasets` on its own test
    split over its own class list (ImageNet-A / -R: their 200 classes). Local: a client's
    own classes. Avg: the unweighted mean over the test datasets that were not trained on
    (ImageNet to its variants: the variants only)."""

    metrics = ("Avg",)  # plus Local and one column per test dataset, named after it
    headline = "Avg"
    several_datasets = True
    uses_eval_datasets = True

    def planned_clients(self, config):

        return _planned_chunks(
            config.datasets, config, lambda info: chunk_count(info.num_classes, config.classes_per_client)
        )

    def check(self, config: RunConfig) -> None:
        super().check(config)
        if not set(config.test_datasets) - set(config.datasets):
            raise ConfigError(
                "the transfer protocol needs datasets to test on besides those trained on: "
                "--eval-datasets NAME+NAME (e.g. imagenet_v2+imagenet_sketch+imagenet_a+imagenet_r)"
            )

    def partition(self, dataset: DatasetSplits, config: RunConfig) -> Partition:
        members = members_of(dataset)
        groups = [ChunkGroup(m.name, m.class_ids) for m in members if m.trains]
        return _chunk_partition(dataset, config, self.name, groups, targets=tuple(config.test_datasets))

    def requests(self, client, partition, dataset):
        home = _member(dataset, client.domain)
        labels = dataset.test.labels
        wanted = {
            "Local": Request.of(indices_of_classes(labels, client.class_ids, home.test_indices), client.class_ids)
        }
        for name in partition.targets:
            member = _member(dataset, name)
            wanted[name] = Request.of(member.test_indices, member.class_ids)
        return wanted

    def summarize(self, per_client, partition):
        summary = super().summarize(per_client, partition)
        trained = {c.domain for c in partition.clients}
        unseen = [summary[name] for name in partition.targets if name not in trained]
        summary["Avg"] = float(np.mean(unseen)) if unseen else float("nan")
        return summary
