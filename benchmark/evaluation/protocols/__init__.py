"""The built-in protocols, one module each, registered on import by `@register_protocol`
(`benchmark.protocol`). `benchmark.protocol_registry` discovers every module of this
package and answers the lookups (`get_protocol`, `available_protocols`); this package
imports neither, so the discovery closes no import cycle. `helpers` holds what several
protocols share."""
