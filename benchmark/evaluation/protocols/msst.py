"""msst: multi-source single-target domain generalization (the FedMVP paper). Clients =
(source domain x block of `classes_per_client` classes), every class of the dataset; one
held-out `target` domain (default: the authors' fixed target) is scored on its test images
over all classes. Leave-one-domain-out = one run per target, averaged unweighted by the
table (a preset's `targets: lodo`, through `part_option`)."""

from __future__ import annotations

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import chunk_partition, planned_chunks
from benchmark.evaluation.requests import Request
from benchmark.protocol import Option, Protocol, register_protocol
from data.catalog import dataset_info
from data.partition import ChunkGroup, chunk_count

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
    """Source domains x class blocks as clients; Acc on the held-out target domain."""

    metrics = ("Acc",)
    headline = "Acc"
    options = {
        "classes_per_client": Option(int, 20, "classes per client (sets the client count)", ge=1),
        "target": Option(str, "", "held-out target domain ('' = the authors' fixed target for the dataset)"),
    }
    part_option = "target"

    @classmethod
    def parts(cls, dataset, spec):
        return msst_targets(dataset, spec)

    @classmethod
    def run_name_part(cls, args):
        return f"_to-{args['target']}" if args["target"] else ""

    def planned_clients(self, config):
        per_client = config.protocol_args["classes_per_client"]
        return planned_chunks(
            config.datasets, lambda info: (len(info.domains) - 1) * chunk_count(info.num_classes, per_client)
        )

    def trained_share(self, num_classes, num_domains):
        return num_classes, max(1, num_domains) - 1  # one domain is the held-out target

    def check(self, config):
        super().check(config)
        if not config.protocol_args["target"] and config.dataset not in FIXED_TARGETS:
            raise ConfigError(
                f"msst protocol on {config.dataset}: no fixed target domain is known for it; "
                "name the held-out domain with --target DOMAIN"
            )

    @staticmethod
    def target_of(dataset, config) -> str:
        target = config.protocol_args["target"] or FIXED_TARGETS.get(dataset.name, "")
        domains = dataset.domain_names or []
        if target not in domains:
            raise ConfigError(
                f"msst protocol on {dataset.name}: target domain {target!r} is not one of its domains "
                f"({', '.join(domains) or 'none: it is not a multi-domain dataset'}); set --target"
            )
        return target

    def partition(self, dataset, config):
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
        return chunk_partition(dataset, config, self.name, groups, targets=(target,))

    def requests(self, client, partition, dataset):
        (target,) = partition.targets
        indices = [i for i, d in enumerate(dataset.test.domains) if d == target]
        if not indices:
            raise ConfigError(f"msst protocol on {dataset.name}: target domain {target} has no test images")
        return {"Acc": Request.of(indices, range(len(dataset.class_names)))}
