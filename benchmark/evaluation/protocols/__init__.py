"""The built-in protocols, one module each, registered on import by `@register_protocol`
(`benchmark.protocol`, which discovers every module of this package). `helpers` holds what
several of them share. The registry's names are re-exported for the code that scores runs."""

from benchmark.protocol import Option, Protocol, available_protocols, get_protocol, register_protocol

__all__ = ["Option", "Protocol", "available_protocols", "get_protocol", "register_protocol"]
