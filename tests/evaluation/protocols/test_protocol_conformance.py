"""What every registered protocol must do (issue 49, item 8; in the manner of torchmetrics'
shared tester). Each built-in protocol of benchmark/evaluation/protocols/ and the guide's
plugin example (docs/examples/round_robin_protocol.py, registered for its own cases only)
partitions a small fake dataset of its kind, with the catalog's class counts and domains, and
runs the same checks:

- the partition is well formed: clients numbered 0..N-1 (N as `planned_clients` said), each
  with training images of its own classes only, no training or test image held twice, a
  client of a domain drawing from that domain alone, the same partition from the same seed;
- it covers what the protocol promises (`SCENARIOS`: every training and test image once, the
  classes it deals without overlap), and holds at most `shots` images of a class per client;
- its requests name existing test images and classes, every image among its candidate
  classes, its targets name existing domains or datasets, and `summarize` of constant scores
  gives every headline metric that score;
- bad options are refused with a ConfigError naming them (the declared bounds, choices and
  types, an unknown option), and settings the data cannot serve with a UserError or a
  ValueError naming what to change (`BAD_SETTINGS`).

A protocol added without a scenario here runs the generic checks on a one-dataset federation,
and the registration test fails until its scenario and refusals are declared.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from protocol_fakes import _fake

from benchmark import protocol_registry as registry
from benchmark.config import ConfigError, build_config
from benchmark.errors import UserError
from benchmark.protocol_registry import get_protocol, resolve_protocol_args
from data.catalog import dataset_info
from data.combined import combine, members_of
from data.partition import base_novel_split

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "round_robin_protocol.py"
PLUGIN = "round_robin"


@dataclass(frozen=True)
class Scenario:
    """A protocol's small federation: its run options, how many fake images per class, and
    what its partition promises to cover (at `shots: 0`)."""

    options: dict[str, Any]
    train_per_class: int = 3
    test_per_class: int = 2
    every_train_image: bool = False  # each training image held by one client
    every_test_image: bool = False  # each test image in one client's test shard
    # (dataset, partition) -> the classes each group of clients (their `domain`: a domain, a
    # dataset, or None) is dealt, without overlap within the group.
    dealt: Callable | None = None


def base_halves(dataset, partition) -> dict:
    """Each trained dataset's base classes (the first half), to its clients."""
    return {m.name: {m.offset + c for c in base_novel_split(m.num_classes)[0]} for m in members_of(dataset) if m.trains}


def base_half(dataset, partition) -> dict:
    """The dataset's base classes, to all clients."""
    return {None: set(base_novel_split(len(dataset.class_names))[0])}


def every_class_per_source(dataset, partition) -> dict:
    """Every class, to the clients of each domain but the held-out target."""
    classes = set(range(len(dataset.class_names)))
    return {d: classes for d in dataset.domain_names if d not in partition.targets}


def trained_datasets_classes(dataset, partition) -> dict:
    """Every class of each trained dataset, to its clients; the test-only datasets' to none."""
    return {m.name: set(m.class_ids) for m in members_of(dataset) if m.trains}


SCENARIOS = {
    "base2novel": Scenario({"dataset": "dtd", "clients": 5}, dealt=base_half),
    "classchunk": Scenario({"dataset": "dtd+oxford_pets", "classes_per_client": 10}, dealt=base_halves),
    "dirichlet": Scenario(
        {"dataset": "eurosat", "clients": 3, "beta": 0.5},
        train_per_class=6,
        test_per_class=4,
        every_train_image=True,
        every_test_image=True,
    ),
    "domains": Scenario(
        {"dataset": "office_caltech10", "clients": 8, "min_client_size": 1},
        train_per_class=4,
        every_train_image=True,
        every_test_image=True,
    ),
    "msst": Scenario({"dataset": "pacs", "classes_per_client": 3}, dealt=every_class_per_source),
    "pathological": Scenario(
        {"dataset": "eurosat", "clients": 10, "classes_per_client": 2},
        train_per_class=4,
        every_train_image=True,  # 10 clients hold every one of the 10 classes (client i: class i)
        every_test_image=True,
    ),
    "transfer": Scenario(
        {"dataset": "dtd", "classes_per_client": 10, "eval_datasets": "oxford_pets"}, dealt=trained_datasets_classes
    ),
    PLUGIN: Scenario({"dataset": "dtd", "clients": 3}, every_train_image=True),
}
DEFAULT = Scenario({"dataset": "dtd", "clients": 3})

# Settings each protocol must refuse, with what the message must say: options its declaration
# cannot rule out and data it cannot serve (checked by `check`, else by `partition`).
BAD_SETTINGS = {
    "base2novel": [
        ({"clients": 30}, "cannot deal 24 base classes to 30 clients"),
        ({"dataset": "dtd+eurosat"}, "runs on one dataset"),
    ],
    "classchunk": [({"classes_per_client": 0}, "classes_per_client")],
    "dirichlet": [({"min_client_size": 100}, "min-client-size")],
    "domains": [
        ({"clients": 6}, "cannot be split evenly over the 4 domains"),
        ({"dataset": "dtd"}, "needs a feature-shift dataset"),
    ],
    "msst": [
        ({"target": "painting"}, "'painting' is not one of its domains"),
        ({"dataset": "dtd", "target": "x"}, "needs a dataset with per-image domains"),
    ],
    "pathological": [
        ({"classes_per_client": 11}, "must be between 1 and the 10 classes"),
        ({"clients": 50, "classes_per_client": 1}, "got no training image"),  # 4 images, 5 holders,
    ],
    "transfer": [
        ({"eval_datasets": ""}, "needs datasets to test on"),
        ({"eval_datasets": "dtd"}, "needs datasets to test on"),
        ({"eval_datasets": "oxford_pets+oxford_pets"}, "each once"),
    ],
    PLUGIN: [({"stride": 1000}, "leave a client empty")],
}


def builtin_protocols() -> list[str]:
    """The built-in protocols (the plugins other test modules register are left out: the
    parametrization must not depend on which modules pytest imported first)."""
    package = registry.BUILTIN_PACKAGE + "."
    return sorted(n for n, c in registry.available_protocols().items() if c.__module__.startswith(package))


PROTOCOLS = builtin_protocols() + [PLUGIN]


@pytest.fixture
def protocol(request, monkeypatch, isolated_registry):
    """The protocol `name` of the test's parameters; the guide's plugin is registered into a
    copy of the registry that the test's end restores."""
    name = request.node.callspec.params["name"]
    if name == PLUGIN:
        registry.available_protocols()
        isolated_registry(registry.PROTOCOLS).loaded = True
        spec = importlib.util.spec_from_file_location("conformance_round_robin", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
    return get_protocol(name)


def config_of(name: str, shots: int = 0, **options):
    scenario = SCENARIOS.get(name, DEFAULT)
    return build_config({"protocol": name, "shots": shots, "seed": 1, **scenario.options, **options})


def dataset_of(name: str, config):
    """Fake splits of the config's datasets with the catalog's classes and domains; a
    federation over several (or with test-only datasets) combined as a run combines them."""
    scenario = SCENARIOS.get(name, DEFAULT)

    def fake(dataset: str):
        info = dataset_info(dataset)
        return _fake(
            dataset, info.num_classes, scenario.train_per_class, scenario.test_per_class, list(info.domains) or None
        )

    trained, tested = [fake(d) for d in config.datasets], [fake(d) for d in config.test_datasets]
    if len(trained) == 1 and not tested:
        return trained[0]
    return combine("+".join(config.datasets + config.test_datasets), trained, tested)


def partitioned(protocol, shots: int = 0, **options):
    config = config_of(protocol.name, shots, **options)
    protocol.check(config)
    dataset = dataset_of(protocol.name, config)
    return config, dataset, protocol.partition(dataset, config)


def test_every_protocol_module_is_registered_and_has_a_scenario():
    import pkgutil

    import benchmark.evaluation.protocols as package

    modules = {info.name for info in pkgutil.iter_modules(package.__path__)} - {"helpers"}
    assert {registry.available_protocols()[n].__module__.rpartition(".")[2] for n in builtin_protocols()} == modules
    assert set(PROTOCOLS) == set(SCENARIOS) == set(BAD_SETTINGS)


@pytest.mark.parametrize("name", PROTOCOLS)
class TestProtocolContract:
    def test_the_partition_is_well_formed_and_reproducible(self, name, protocol):
        config, dataset, partition = partitioned(protocol)
        train, test = dataset.train.labels, dataset.test.labels
        num_classes = len(dataset.class_names)
        domains = list(dataset.domain_names or [])
        assert partition.protocol == name
        assert [c.client_id for c in partition.clients] == list(range(len(partition.clients))) != []
        assert protocol.planned_clients(config) in (None, len(partition.clients))
        held = Counter(i for c in partition.clients for i in c.train_indices)
        assert set(held.values()) == {1}, f"{name}: training images held twice"
        shards = Counter(i for c in partition.clients for i in c.test_indices or ())
        assert set(shards.values()) <= {1}, f"{name}: test images in two clients' shards"
        for client in partition.clients:
            assert client.train_indices and all(0 <= i < len(train) for i in client.train_indices)
            assert list(client.class_ids) == sorted(set(client.class_ids)), client.client_id
            assert {train[i] for i in client.train_indices} <= set(client.class_ids), client.client_id
            assert set(client.class_ids) <= set(client.train_classes) <= set(range(num_classes))
            assert all(0 <= i < len(test) for i in client.test_indices or ())
            if client.domain in domains:  # a client of a domain draws from it alone
                assert {dataset.train.domains[i] for i in client.train_indices} == {client.domain}
        again = protocol.partition(dataset_of(name, config), config)
        assert again.hash == partition.hash, f"{name}: the same seed gave another partition"

    def test_the_partition_covers_what_the_protocol_promises(self, name, protocol):
        _, dataset, partition = partitioned(protocol)
        scenario = SCENARIOS.get(name, DEFAULT)
        if scenario.every_train_image:
            held = sorted(i for c in partition.clients for i in c.train_indices)
            assert held == list(range(len(dataset.train))), f"{name}: training images lost"
        if scenario.every_test_image:
            shards = sorted(i for c in partition.clients for i in c.test_indices or ())
            assert shards == list(range(len(dataset.test))), f"{name}: test images lost"
        if scenario.dealt is not None:
            groups: dict[Any, list[int]] = {}
            for client in partition.clients:
                groups.setdefault(client.domain, []).extend(client.class_ids)
            expected = scenario.dealt(dataset, partition)
            assert groups.keys() == expected.keys(), f"{name}: clients of {sorted(groups, key=str)}"
            for group, dealt in groups.items():
                assert len(dealt) == len(set(dealt)), f"{name}: a class dealt twice in {group}"
                assert set(dealt) == expected[group], f"{name}: classes of {group} lost or added"
        if partition.base_class_ids:
            base, novel = set(partition.base_class_ids), set(partition.novel_class_ids)
            assert not base & novel and base | novel == set(range(len(dataset.class_names)))
            assert all(set(c.class_ids) <= base for c in partition.clients)

    def test_a_client_holds_at_most_shots_images_of_a_class(self, name, protocol):
        _, dataset, partition = partitioned(protocol, shots=1)
        for client in partition.clients:
            counts = Counter(dataset.train.labels[i] for i in client.train_indices)
            assert client.train_indices and max(counts.values()) <= 1, f"{name}: client {client.client_id} {counts}"

    def test_requests_name_existing_test_images_and_classes(self, name, protocol):
        _, dataset, partition = partitioned(protocol)
        labels, num_classes = dataset.test.labels, len(dataset.class_names)
        names = set(dataset.domain_names or []) | {m.name for m in members_of(dataset)}
        assert set(partition.targets) <= names, f"{name}: targets {partition.targets} name no domain or dataset"
        per_client = {}
        for client in partition.clients:
            wanted = protocol.requests(client, partition, dataset)
            assert wanted, f"{name}: client {client.client_id} asks for nothing"
            for metric, request in wanted.items():
                where = f"{name}: client {client.client_id}'s {metric}"
                # empty only for a client whose own test shard is (the protocols' nanmean skips it)
                assert request.indices or client.test_indices == (), f"{where}: no test image"
                assert all(0 <= i < len(labels) for i in request.indices), where
                assert len(set(request.indices)) == len(request.indices), where
                assert request.class_ids and all(0 <= k < num_classes for k in request.class_ids), where
                assert len(set(request.class_ids)) == len(request.class_ids), where
                assert {labels[i] for i in request.indices} <= set(request.class_ids), f"{where}: labels not candidates"
            scores = {metric: 50.0 for metric in wanted}
            per_client[client.client_id] = protocol.metrics_from(scores, client, partition, dataset)
        summary = protocol.summarize(per_client, partition)
        assert set(protocol.metrics) <= set(summary), f"{name}: summary {sorted(summary)} lacks {protocol.metrics}"
        for metric in protocol.metrics:
            assert summary[metric] == pytest.approx(50.0), f"{name}: {metric} of constant scores is {summary[metric]}"
        assert all(isinstance(v, float) and math.isfinite(v) for v in protocol.details(per_client, partition).values())

    def test_bad_option_values_are_refused_naming_the_option(self, name, protocol):
        cls = type(protocol)
        assert resolve_protocol_args(name, {}) == {k: o.default for k, o in cls.options.items()}
        with pytest.raises(ConfigError, match="no option 'no_such_option'"):
            resolve_protocol_args(name, {"no_such_option": 1})
        with pytest.raises(ConfigError, match="unknown option 'no_such_option'"):
            build_config({"protocol": name, "no_such_option": 1})
        for option, declared in cls.options.items():
            for bad in bad_values(declared):
                with pytest.raises(ConfigError, match=f"{option} = "):
                    resolve_protocol_args(name, {option: bad})
                with pytest.raises(ConfigError, match=f"{option} = "):
                    build_config({"protocol": name, option: bad})

    def test_settings_the_data_cannot_serve_are_refused_with_a_clear_error(self, name, protocol):
        for options, message in BAD_SETTINGS.get(name, []):
            with pytest.raises((UserError, ValueError), match=message):
                partitioned(protocol, **options)


def bad_values(option) -> list:
    """Values `option`'s declaration rules out: another type, outside its bounds or choices."""
    kind = option.type
    values: list = {int: ["many", 2.5, True], float: ["many", float("nan"), float("inf")], bool: ["maybe", 2]}.get(
        kind, []
    )
    if option.choices:
        values.append("nonsense" if kind is str else max(option.choices) + 1)
    if option.ge is not None:
        values.append(option.ge - 1 if kind is int else option.ge - 0.5)
    if option.gt is not None:
        values.append(kind(option.gt))
    if option.le is not None:
        values.append(option.le + 1)
    return values


@pytest.mark.parametrize(
    "options, message",
    [
        ({"dataset": "dtd+caltech101", "protocol": "base2novel"}, "runs on one dataset"),
        ({"dataset": "dtd", "protocol": "msst"}, "no fixed target domain is known"),
        ({"dataset": "imagenet", "protocol": "transfer"}, "needs datasets to test on"),
    ],
)
def test_protocol_settings_are_checked_before_loading(options, message):
    config = build_config(options)
    with pytest.raises(ConfigError, match=message):
        get_protocol(config.protocol).check(config)
