"""The protocol contract and its decorator: how a dataset is split across clients and which
metrics a run reports, with the options a protocol takes.

A protocol is a `Protocol` subclass registered with `@register_protocol("name")`, one file
each: the built-ins in `benchmark/evaluation/protocols/`, others in any importable module
named by `FEDBENCH_PROTOCOLS` (module names or .py files, separated by commas) or by a
package's `fedbench.protocols` entry point. Each declares its own `options` (name ->
`Option`: type, default, help, choices, bounds) the way a method declares hyperparameters:
`RunConfig.protocol_args` holds their values, checked against the declaration, and each
option is a `fedbench run` flag (`--beta 0.3`) and a flat YAML key (`beta: 0.3`).

`@register_protocol` adds a class to `PROTOCOLS` (a `benchmark.plugins.Registry`); the
lookups that discover the protocols first live one floor up, in `benchmark.protocol_registry`,
which no protocol imports. This module and the protocol files load no torch: `fedbench
--help` lists the registered protocols and their flags (tests/system/test_validation.py). A partition is a pure
function of the labels and the seed; `requests` says what each client's metrics need (test
images and classes), `metrics_from` turns the evaluator's scores into the client's metrics,
`summarize` turns the per-client metrics into the run's headline numbers.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from benchmark.errors import ConfigError
from benchmark.plugins import Registry
from benchmark.values import coerce

if TYPE_CHECKING:
    from benchmark.evaluation.requests import Request
    from data.base import DatasetSplits
    from data.partition import ClientShard, Partition

# The environment variable and the entry-point group that add protocols to the built-ins.
PLUGINS_VARIABLE = "FEDBENCH_PROTOCOLS"
ENTRY_POINT_GROUP = "fedbench.protocols"
TYPES = (int, float, str, bool)


class RunSettings(typing.Protocol):
    """What a protocol reads of a run's settings: `benchmark.config.RunConfig` is one (named
    here, not imported: the config resolves protocol options through the registry, and a
    type hint pointing back would close an import cycle)."""

    dataset: str
    datasets: list[str]
    test_datasets: list[str]
    clients: int
    seed: int
    shots: int
    protocol_args: dict[str, Any]


@dataclass(frozen=True)
class Option:
    """One option of a protocol: its type (int, float, str or bool), default and help; the
    values it takes are `choices` when given, and numbers within the bounds given (`gt`/`ge`
    below, `le` above). A str option given a YAML list joins it with '+' (dataset lists)."""

    type: type
    default: Any
    help: str
    choices: tuple = ()
    gt: float | None = None
    ge: float | None = None
    le: float | None = None

    def expected(self) -> str:
        if self.choices:
            return " or ".join(map(str, self.choices))
        bounds = [
            f"{sign} {bound:g}"
            for sign, bound in ((">", self.gt), (">=", self.ge), ("<=", self.le))
            if bound is not None
        ]
        kind = {int: "an integer", float: "a finite number", bool: "true or false", str: "text"}[self.type]
        return f"{kind} {' and '.join(bounds)}".strip()

    def describe(self) -> str:
        """'TYPE, expected ..., default X: help', as `--protocol-help` and `--help` show it."""
        return f"{self.type.__name__}, {self.expected()}; default {self.default!r}. {self.help}"

    def convert(self, name: str, value: Any) -> Any:
        """`value` (from YAML or a flag's text) as this option's type, or a ConfigError naming
        `name`; as strict as the run options: YAML `true` is no number, 2.5 no integer."""
        if self.type is str and isinstance(value, (list, tuple)):
            value = "+".join(str(v) for v in value)
        try:
            converted = self._converted(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{name} = {value!r} is invalid: expected {self.expected()}") from None
        ok = (not self.choices or converted in self.choices) and not (
            (self.gt is not None and not converted > self.gt)
            or (self.ge is not None and not converted >= self.ge)
            or (self.le is not None and not converted <= self.le)
        )
        if not ok:
            raise ConfigError(f"{name} = {value!r} is invalid: expected {self.expected()}")
        return converted

    def _converted(self, value: Any) -> Any:
        if isinstance(value, (list, tuple, dict)):  # no option is a container ("a+b" lists are joined above)
            raise ValueError(value)
        return coerce(self.type, value)


class Protocol:
    """The contract (docs/writing-a-protocol.md). Class attributes: `metrics` (the headline
    metrics, in table order), `headline` (the one that ranks methods), `several_datasets`
    (whether `dataset` may name several, 'a+b'), `options` (name -> Option)."""

    name: ClassVar[str] = ""
    metrics: ClassVar[tuple[str, ...]] = ()
    headline: ClassVar[str] = ""
    several_datasets: ClassVar[bool] = False
    options: ClassVar[dict[str, Option]] = {}
    # A preset's `targets:` runs one cell per value of this option and shows them as one
    # table cell (their headline, each and averaged): '' for a protocol without such parts.
    part_option: ClassVar[str] = ""

    def check(self, config: RunSettings) -> None:
        """Reject a setting this protocol cannot serve, before any data is loaded."""
        if len(config.datasets) > 1 and not self.several_datasets:
            several = [n for n, c in PROTOCOLS.members.items() if c.several_datasets]
            raise ConfigError(
                f"protocol {self.name} runs on one dataset, got dataset = {config.dataset!r}; "
                f"federations over several datasets use --protocol {' or '.join(several)}"
            )

    def planned_clients(self, config: RunSettings) -> int | None:
        """How many clients a run will have, known before its data is loaded (None: unknown)."""
        return config.clients

    @classmethod
    def test_datasets(cls, args: dict[str, Any]) -> list[str]:
        """Datasets the run tests on without training on them, from the protocol's options."""
        return []

    @classmethod
    def run_name_part(cls, args: dict[str, Any]) -> str:
        """Text the run folder's name carries after the dataset ('' for none)."""
        return ""

    @classmethod
    def parts(cls, dataset: str, spec: Any) -> list[str]:
        """The values of `part_option` a preset's `targets: spec` expands into on `dataset`."""
        raise ConfigError(f"protocol {cls.name} takes no preset targets (it has no part_option)")

    def trained_share(self, num_classes: int, num_domains: int) -> tuple[int, int]:
        """(classes, domains) of a dataset the federation trains on, for cost estimates."""
        return num_classes, 1

    def details(self, per_client: dict[int, dict[str, float]], partition: Partition) -> dict[str, float]:
        """Numbers kept in the run folder beside the headline ones (per dataset, say)."""
        return {}

    def partition(self, dataset: DatasetSplits, config: RunSettings) -> Partition:
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
        import numpy as np  # lazy: `fedbench --help` imports this registry and stays fast without numpy

        names = next(iter(per_client.values())).keys()
        return {m: float(np.mean([v[m] for v in per_client.values()])) for m in names}


PROTOCOLS: Registry[type[Protocol]] = Registry("protocol", group=ENTRY_POINT_GROUP, variable=PLUGINS_VARIABLE)


def register_protocol(name: str) -> Callable[[type[Protocol]], type[Protocol]]:
    def decorate(cls: type[Protocol]) -> type[Protocol]:
        if cls.headline not in cls.metrics:
            raise ValueError(f"protocol {name!r}: headline {cls.headline!r} must be one of its metrics {cls.metrics}")
        for option_name, option in cls.options.items():
            if option.type not in TYPES:
                raise ValueError(
                    f"protocol {name!r}: option {option_name!r} has type {option.type!r}; use int, float, str or bool"
                )
            option.convert(option_name, option.default)  # a default outside its own bounds is the author's error
        if cls.part_option and cls.part_option not in cls.options:
            raise ValueError(f"protocol {name!r}: part_option {cls.part_option!r} is not one of its options")
        PROTOCOLS.add(name, cls)
        cls.name = name
        return cls

    return decorate
