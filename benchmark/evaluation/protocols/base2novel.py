"""base2novel: the pFedMMA paper's protocol. Base classes dealt to clients; Local / Base /
Novel / HM (docs/protocols.md)."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.requests import Request, harmonic_mean, indices_of_classes
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import base2novel_partition


@register_protocol("base2novel")
class Base2Novel(Protocol):
    """Base classes dealt to clients; Local / Base / Novel / HM (docs/protocols.md)."""

    metrics = ("Local", "Base", "Novel", "HM")
    headline = "HM"
    options = {
        "class_dealing": Option(
            str,
            "balanced",
            "balanced (client sizes differ by at most one class) | authors (round(n/N) each, the last "
            "client takes the rest; the paper's partitions)",
            choices=("balanced", "authors"),
        ),
    }

    def trained_share(self, num_classes, num_domains):
        return -(-num_classes // 2), 1  # the base half

    def partition(self, dataset, config):
        try:
            return base2novel_partition(
                dataset.train.labels,
                len(dataset.class_names),
                config.clients,
                config.shots,
                config.seed,
                config.protocol_args["class_dealing"],
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
