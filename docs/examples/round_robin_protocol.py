"""A protocol in one file: training images dealt to the clients in turn (an IID split),
every client scored on the whole test split over all classes. Its own option, `stride`,
keeps every stride-th training image. Import it through FEDBENCH_PROTOCOLS=module.name
(or a package's `fedbench.protocols` entry point), then `fedbench run --protocol round_robin`."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.requests import Request
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import ClientShard, Partition


@register_protocol("round_robin")
class RoundRobin(Protocol):
    """Training images dealt to clients in turn; Acc on the whole test split."""

    metrics = ("Acc",)
    headline = "Acc"
    options = {"stride": Option(int, 1, "keep every stride-th training image (1 = all)", ge=1)}

    def partition(self, dataset, config):
        kept = list(range(0, len(dataset.train.labels), config.protocol_args["stride"]))
        every_class = tuple(range(len(dataset.class_names)))
        clients = tuple(ClientShard(i, tuple(kept[i :: config.clients]), every_class) for i in range(config.clients))
        if any(not client.train_indices for client in clients):
            raise ConfigError(f"round_robin on {dataset.name}: {len(kept)} images leave a client empty; lower stride")
        return Partition(self.name, clients)

    def requests(self, client, partition, dataset):
        return {"Acc": Request.of(range(len(dataset.test.labels)), range(len(dataset.class_names)))}
