"""classchunk: base-to-new over one or several datasets ('a+b+c'), the FedTPG / FedMVP
harness. Each dataset's base classes (the first ceil(C/2)) are dealt in contiguous blocks of
`classes_per_client`, one client per block. Local: a client's test images over its own
classes; Base / New: the dataset's base / new test images over its base / new classes only.
Each is averaged over the dataset's clients, then over datasets with equal weights; HM of
the three averages. For methods whose clients share one global state (all of this family's)
every metric is the global model's, which the evaluator's memo scores once."""

from __future__ import annotations

import math

from benchmark.evaluation.protocols.helpers import chunk_partition, mean, mean_by_group, member_named, planned_chunks
from benchmark.evaluation.requests import Request, harmonic_mean, indices_of_classes
from benchmark.protocol import Option, Protocol, register_protocol
from data.partition import ChunkGroup, base_novel_split, chunk_count


@register_protocol("classchunk")
class ClassChunkBase2New(Protocol):
    """Blocks of base classes per client over one or several datasets; Local / Base / New / HM."""

    metrics = ("Local", "Base", "New", "HM")
    headline = "HM"
    several_datasets = True
    options = {
        "classes_per_client": Option(int, 20, "classes per client (sets the client count)", ge=1),
    }

    def planned_clients(self, config):
        per_client = config.protocol_args["classes_per_client"]
        return planned_chunks(config.datasets, lambda info: chunk_count(math.ceil(info.num_classes / 2), per_client))

    def trained_share(self, num_classes, num_domains):
        return math.ceil(num_classes / 2), 1  # the base half

    def partition(self, dataset, config):
        from data.combined import members_of  # lazy: data.combined loads torch, the registry must not

        groups, base_all, novel_all = [], [], []
        for member in members_of(dataset):
            base, novel = base_novel_split(member.num_classes)
            base_ids = [member.offset + c for c in base]
            groups.append(ChunkGroup(member.name, tuple(base_ids)))
            base_all += base_ids
            novel_all += [member.offset + c for c in novel]
        return chunk_partition(dataset, config, self.name, groups, base_class_ids=base_all, novel_class_ids=novel_all)

    def requests(self, client, partition, dataset):
        member = member_named(dataset, client.domain)
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
        summary = {m: mean(mean_by_group(per_client, partition, m).values()) for m in ("Local", "Base", "New")}
        summary["HM"] = harmonic_mean(summary["Local"], summary["Base"], summary["New"])
        return summary

    def details(self, per_client, partition):
        return {
            f"{group}/{metric}": value
            for metric in ("Local", "Base", "New")
            for group, value in mean_by_group(per_client, partition, metric).items()
        }
