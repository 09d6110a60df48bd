"""The method registry: the single source of method names.

Built-ins in `methods/` register with `@register_method("name")`; a third-party package
declares an entry point in the group `fedbench.methods` pointing at its module (or at the
class). A plugin that fails to load is reported by name and package; the others still work.
A method's `__init__` arguments (after `backbone`) are its hyperparameters: `hyperparameters()`
reads them, and the CLI and YAML configs are generated from that.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable, TypeVar

from benchmark.method import FederatedMethod

ENTRY_POINT_GROUP = "fedbench.methods"
M = TypeVar("M", bound=type[FederatedMethod])

_METHODS: dict[str, type[FederatedMethod]] = {}
_ORIGINS: dict[str, str] = {}
PLUGIN_ERRORS: dict[str, str] = {}  # entry point -> one-line reason it could not be loaded
_loaded = False
_current_origin = "fedbench"


class MethodError(ValueError):
    """An unknown method, a bad hyperparameter or a broken plugin; the message says what to do."""


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make `cls` available as `--method name`."""

    def decorate(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, FederatedMethod)):
            raise MethodError(f"@register_method({name!r}) must decorate a FederatedMethod subclass, got {cls!r}")
        if name in _METHODS and _METHODS[name] is not cls:
            raise MethodError(
                f"method name {name!r} from {_current_origin} is already registered by {_ORIGINS[name]}; "
                "choose another name"
            )
        cls.name = name
        _METHODS[name] = cls
        _ORIGINS[name] = _current_origin
        return cls

    return decorate


def available_methods() -> dict[str, type[FederatedMethod]]:
    _load_all()
    return dict(sorted(_METHODS.items()))


def method_origin(name: str) -> str:
    _load_all()
    return _ORIGINS[name]


def get_method(name: str) -> type[FederatedMethod]:
    methods = available_methods()
    if name not in methods:
        broken = "".join(f"\n  plugin {ep}: {why}" for ep, why in PLUGIN_ERRORS.items())
        raise MethodError(
            f"unknown method {name!r}. Registered methods: {', '.join(methods)}. "
            "`fedbench methods` describes them; a new method is a module in methods/ decorated with "
            "@register_method, or a package with an entry point in the group 'fedbench.methods'."
            + (f"\nPlugins that failed to load:{broken}" if broken else "")
        )
    return methods[name]


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    type: type
    default: Any
    help: str = ""


def hyperparameters(cls: type[FederatedMethod]) -> list[Hyperparameter]:
    """The `__init__` arguments after `backbone`, with their types and defaults."""
    signature = inspect.signature(cls.__init__)
    hints = typing.get_type_hints(cls.__init__)
    params = []
    for p in list(signature.parameters.values())[2:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            raise MethodError(f"method {cls.name!r}: hyperparameter {p.name!r} needs a default")
        params.append(Hyperparameter(p.name, _plain_type(hints.get(p.name, type(p.default))), p.default))
    return params


def build_method(name: str, backbone, method_args: dict[str, Any] | None = None) -> FederatedMethod:
    """Instantiate method `name` with validated, type-converted hyperparameters."""
    cls = get_method(name)
    known = {h.name: h for h in hyperparameters(cls)}
    args = dict(method_args or {})
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise MethodError(
            f"method {name!r} has no hyperparameter {', '.join(map(repr, unknown))}. "
            f"Its hyperparameters: {', '.join(known) or 'none'} (see `fedbench methods --describe {name}`)."
        )
    converted = {k: convert_value(known[k], v, name) for k, v in args.items()}
    return cls(backbone, **converted)


def convert_value(h: Hyperparameter, value: Any, method: str) -> Any:
    if value is None or isinstance(value, h.type) and not (h.type is int and isinstance(value, bool)):
        return value
    try:
        if h.type is bool:
            return parse_bool(value)
        if h.type in (int, float, str):
            if h.type is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return h.type(value)
    except (TypeError, ValueError):
        pass
    raise MethodError(
        f"method {method!r}: hyperparameter {h.name!r} expects {h.type.__name__}, got {value!r} "
        f"(default {h.default!r})"
    )


def parse_bool(value: Any) -> bool:
    # "false" must not be truthy (a classic research-code bug with string flags).
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _plain_type(hint: Any) -> type:
    # `int | None` -> int; anything exotic is taken as str on the command line.
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if args:
        hint = args[0]
    return hint if hint in (int, float, str, bool) else str


def _load_all() -> None:
    global _loaded, _current_origin
    if _loaded:
        return
    _loaded = True
    import methods

    for info in pkgutil.iter_modules(methods.__path__):
        importlib.import_module(f"methods.{info.name}")
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        package = ep.dist.name if ep.dist is not None else "unknown package"
        _current_origin = f"plugin {ep.name!r} (package {package})"
        try:
            ep.load()  # importing the module runs its @register_method decorators
        except Exception as exc:  # a broken plugin must not break the built-ins
            PLUGIN_ERRORS[f"{ep.name!r} ({ep.value}, package {package})"] = f"{exc.__class__.__name__}: {exc}"
        finally:
            _current_origin = "fedbench"
