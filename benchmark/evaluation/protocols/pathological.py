"""pathological: label shift on any dataset with labels, k classes per client (McMahan et
al.'s shards; FL-bench's and Flower Datasets' pathological partitioner). Client i holds class
i mod C and k - 1 random others, so clients share classes when N * k > C; each class's images
are split evenly among its holders. Each client's personalized model is scored on its own
test shard (its classes' test images, split like the train images) over all classes; Acc =
mean over clients."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import nanmean
from benchmark.evaluation.requests import Request
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import pathological_partition


@register_protocol("pathological")
class PathologicalLabelShift(Protocol):
    """k classes per client, overlap allowed; Acc on each client's own test shard."""

    metrics = ("Acc",)
    headline = "Acc"
    options = {
        "classes_per_client": Option(
            int, 2, "classes each client holds (k; clients share classes when N * k > C)", ge=1
        ),
    }

    def partition(self, dataset, config):
        try:
            return pathological_partition(
                dataset.train.labels,
                dataset.test.labels,
                config.clients,
                config.protocol_args["classes_per_client"],
                config.seed,
                shots=config.shots,
                num_classes=len(dataset.class_names),
            )
        except ValueError as exc:
            raise ConfigError(f"pathological protocol on {dataset.name}: {exc}") from None

    def requests(self, client, partition, dataset):
        return {"Acc": Request.of(client.test_indices or (), client.label_space)}

    def summarize(self, per_client, partition):
        return {"Acc": nanmean(m["Acc"] for m in per_client.values())}
