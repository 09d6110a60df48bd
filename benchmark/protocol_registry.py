"""The protocols' lookups, one floor above the protocols they discover: every registered
protocol by name, its class, its options resolved.

`available_protocols()` discovers, once, the built-ins (every module of
`benchmark/evaluation/protocols/`), the modules or .py files named by `FEDBENCH_PROTOCOLS`
and the `fedbench.protocols` entry points (`benchmark.plugins.Registry.discover`); their
`@register_protocol` (`benchmark.protocol`, the contract, which imports no protocol) fills
`PROTOCOLS`. No protocol imports this module, so the discovery closes no import cycle.
Neither this module nor the protocol files load torch (`fedbench --help` reads them).
"""

from __future__ import annotations

from typing import Any

from benchmark.errors import ConfigError
from benchmark.protocol import PROTOCOLS, Protocol

# Where the built-in protocols live, one module each.
BUILTIN_PACKAGE = "benchmark.evaluation.protocols"


def available_protocols() -> dict[str, type[Protocol]]:
    """name -> class of every protocol: the built-ins, then FEDBENCH_PROTOCOLS', then entry points'."""
    PROTOCOLS.discover(builtin=BUILTIN_PACKAGE)
    return PROTOCOLS.members


def protocol_class(name: str) -> type[Protocol]:
    protocols = available_protocols()
    if name not in protocols:
        broken = "".join(f"; plugin {k} did not load: {v}" for k, v in PROTOCOLS.errors.items())
        raise ConfigError(f"unknown protocol {name!r}; choose one of: {', '.join(protocols)}{broken}")
    return protocols[name]


def get_protocol(name: str) -> Protocol:
    return protocol_class(name)()


def option_owners() -> dict[str, list[str]]:
    """option name -> the protocols that declare it, in registration order."""
    owners: dict[str, list[str]] = {}
    for protocol, cls in available_protocols().items():
        for option in cls.options:
            owners.setdefault(option, []).append(protocol)
    return owners


def resolve_protocol_args(protocol: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every option of `protocol`: its defaults, overridden by `given` (converted and checked)."""
    cls = protocol_class(protocol)
    unknown = sorted(set(given) - set(cls.options))
    if unknown:
        owners = option_owners().get(unknown[0])
        elsewhere = f" (an option of protocol {', '.join(owners)})" if owners else ""
        raise ConfigError(
            f"protocol {protocol} has no option {unknown[0]!r}{elsewhere}; its options: "
            f"{', '.join(cls.options) or 'none'} (`fedbench run --protocol {protocol} --protocol-help`)"
        )
    return {name: option.convert(name, given.get(name, option.default)) for name, option in cls.options.items()}
