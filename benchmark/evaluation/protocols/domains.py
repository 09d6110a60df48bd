"""domains: feature + label shift on a multi-domain dataset (DomainNet, Office-Caltech10).
`clients` split evenly over the domains, each domain's clients get a Dirichlet(beta) split of
its classes. Each client is scored on its own test shard over all classes; the table shows
each domain's mean over its clients and Avg, the unweighted mean over domains."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import nanmean
from benchmark.evaluation.requests import Request
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import domain_partition


@register_protocol("domains")
class DomainFeatureShift(Protocol):
    """Clients per domain, a Dirichlet(beta) split of each domain's classes; Avg over domains."""

    metrics = ("Avg",)  # plus one column per domain, named after it
    headline = "Avg"
    options = {
        "beta": Option(float, 0.5, "Dirichlet concentration within each domain", gt=0),
        "min_client_size": Option(int, 2, "minimum images per client (the split is redrawn until it holds)", ge=0),
    }

    def trained_share(self, num_classes, num_domains):
        return num_classes, max(1, num_domains)

    def partition(self, dataset, config):
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
        args = config.protocol_args
        try:
            return domain_partition(
                dataset.train.labels,
                dataset.test.labels,
                dataset.train.domains,
                dataset.test.domains,
                config.clients // len(domains),
                args["beta"],
                config.seed,
                min_size=args["min_client_size"],
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
        summary = {domain: nanmean(values) for domain, values in by_domain.items()}
        summary["Avg"] = nanmean(summary.values())
        return summary
