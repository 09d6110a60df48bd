"""dirichlet: label shift on any dataset with labels (the CIFAR protocol). Dirichlet(beta)
class proportions per client; each client's personalized model on its own test shard (the
same class proportions as its train share), over all classes; Acc = mean over clients."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import nanmean
from benchmark.evaluation.requests import Request
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import dirichlet_partition


@register_protocol("dirichlet")
class DirichletLabelShift(Protocol):
    """Dirichlet(beta) label shift over `clients`; Acc on each client's own test shard."""

    metrics = ("Acc",)
    headline = "Acc"
    options = {
        "beta": Option(float, 0.5, "Dirichlet concentration: small = few classes per client", gt=0),
        "min_client_size": Option(int, 2, "minimum images per client (the split is redrawn until it holds)", ge=0),
    }

    def partition(self, dataset, config):
        args = config.protocol_args
        try:
            return dirichlet_partition(
                dataset.train.labels,
                dataset.test.labels,
                config.clients,
                args["beta"],
                config.seed,
                min_size=args["min_client_size"],
                shots=config.shots,
                num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"dirichlet protocol on {dataset.name}: {exc}") from None

    def requests(self, client, partition, dataset):
        return {"Acc": Request.of(client.test_indices or (), client.class_ids)}

    def summarize(self, per_client, partition):
        return {"Acc": nanmean(m["Acc"] for m in per_client.values())}
