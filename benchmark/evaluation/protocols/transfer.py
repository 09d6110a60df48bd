"""transfer: train on `dataset` (every class, blocks of `classes_per_client` per client;
usually ImageNet with participation < 1), then score each of `eval_datasets` on its own test
split over its own class list (ImageNet-A / -R: their 200 classes). Local: a client's own
classes. Avg: the unweighted mean over the test datasets that were not trained on (ImageNet
to its variants: the variants only)."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import chunk_partition, mean, member_named, planned_chunks
from benchmark.evaluation.requests import Request, indices_of_classes
from benchmark.protocol import Option, Protocol, register_protocol
from benchmark.values import dataset_list
from data.partition import ChunkGroup, chunk_count


@register_protocol("transfer")
class Transfer(Protocol):
    """Class blocks of the training datasets as clients; Avg over the datasets tested only."""

    metrics = ("Avg",)  # plus Local and one column per test dataset, named after it
    headline = "Avg"
    several_datasets = True
    options = {
        "classes_per_client": Option(int, 20, "classes per client (sets the client count)", ge=1),
        "eval_datasets": Option(
            str, "", "datasets tested after training on `dataset`, joined by '+' (a YAML list works too)"
        ),
    }

    @classmethod
    def test_datasets(cls, args):
        names = dataset_list(args["eval_datasets"])
        if any(not n for n in names) or len(set(names)) != len(names):
            raise ConfigError(
                f"eval_datasets = {args['eval_datasets']!r} is invalid: expected dataset names joined by '+', "
                "each once, e.g. caltech101+dtd"
            )
        return names

    def planned_clients(self, config):
        per_client = config.protocol_args["classes_per_client"]
        return planned_chunks(config.datasets, lambda info: chunk_count(info.num_classes, per_client))

    def check(self, config):
        super().check(config)
        if not set(config.test_datasets) - set(config.datasets):
            raise ConfigError(
                "the transfer protocol needs datasets to test on besides those trained on: "
                "--eval-datasets NAME+NAME (e.g. imagenet_v2+imagenet_sketch+imagenet_a+imagenet_r)"
            )

    def partition(self, dataset, config):
        from data.combined import members_of  # lazy: data.combined loads torch, the registry must not

        groups = [ChunkGroup(m.name, m.class_ids) for m in members_of(dataset) if m.trains]
        return chunk_partition(dataset, config, self.name, groups, targets=tuple(config.test_datasets))

    def requests(self, client, partition, dataset):
        home = member_named(dataset, client.domain)
        labels = dataset.test.labels
        wanted = {
            "Local": Request.of(indices_of_classes(labels, client.class_ids, home.test_indices), client.class_ids)
        }
        for name in partition.targets:
            member = member_named(dataset, name)
            wanted[name] = Request.of(member.test_indices, member.class_ids)
        return wanted

    def summarize(self, per_client, partition):
        summary = super().summarize(per_client, partition)
        trained = {c.domain for c in partition.clients}
        unseen = [summary[name] for name in partition.targets if name not in trained]
        summary["Avg"] = mean(unseen) if unseen else float("nan")
        return summary
