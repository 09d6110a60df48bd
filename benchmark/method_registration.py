"""The methods' registry and decorator: what a method module imports to register.

`@register_method("name")` checks the class (what can be checked without building it) and
adds it to `METHODS`, the methods' `benchmark.plugins.Registry`. Nothing here imports a
method: `benchmark.registry`, one floor up, discovers them (methods/, FEDBENCH_PLUGINS, the
`fedbench.methods` entry points) and answers every lookup. A method's `__init__` arguments
(after `backbone`) are its hyperparameters: `hyperparameters()` reads them, and the CLI and
YAML configs are generated from that.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any, Callable, TypeVar

from lightning import LightningModule

from benchmark.config import ENTRY_POINT_GROUP, RunConfig
from benchmark.hyperparameters import Hyperparameter, MethodError
from benchmark.method import Choice, FederatedMethod, LogUniform, Range, Uniform
from benchmark.method_contract import CONTRACT, UNCALLED_HOOKS
from benchmark.plugins import Registry
from benchmark.protocol_registry import option_owners

# What a method may override and set, read from the contract's one declaration
# (`benchmark.method_contract.CONTRACT`: core, optional settings, capabilities); `fedbench methods
# --describe`, `fedbench new-method` and the docs' contract table are built from it.
HOOKS = tuple(m.name for m in CONTRACT if m.kind == "hook")
CLASS_ATTRIBUTES = tuple(m.name for m in CONTRACT if m.kind == "attribute")
M = TypeVar("M", bound=type[FederatedMethod])

METHODS: Registry[type[FederatedMethod]] = Registry(
    "method", group=ENTRY_POINT_GROUP, variable="FEDBENCH_PLUGINS", error=MethodError
)


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make `cls` available as `--method name`."""

    def decorate(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, FederatedMethod)):
            raise MethodError(f"@register_method({name!r}) must decorate a FederatedMethod subclass, got {cls!r}")
        if name in METHODS.members and METHODS.members[name] is not cls:
            raise MethodError(METHODS.taken(name))  # before the checks: the name is the first problem
        check_method_class(cls, name)
        cls.name = name
        METHODS.add(name, cls)
        return cls

    return decorate


def reserved_flag_names() -> set[str]:
    """Names a hyperparameter may not take: the run options and `fedbench run`'s own flags."""

    names = set(RunConfig.__dataclass_fields__) | set(option_owners())  # a protocol option is a run flag too
    return names | {"config", "method_help", "protocol_help", "print_config", "help", "force"}


def hyperparameters(cls: type[FederatedMethod], name: str | None = None) -> list[Hyperparameter]:
    """The `__init__` arguments after `backbone`, with their types, defaults, docs and choices."""
    signature = inspect.signature(cls.__init__)
    hints = typing.get_type_hints(cls.__init__)
    docs = argument_docs(cls)
    params = []
    for p in list(signature.parameters.values())[2:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            raise MethodError(f"method {name or cls.name!r}: hyperparameter {p.name!r} needs a default")
        hint = hints.get(p.name, type(p.default))
        choices = tuple(typing.get_args(hint)) if typing.get_origin(hint) is typing.Literal else ()
        keywords = () if choices else _keywords(hint)
        kind = type(choices[0]) if choices else _plain_type(hint)
        bounds = dict(cls.ranges).get(p.name)
        params.append(Hyperparameter(p.name, kind, p.default, docs.get(p.name, ""), choices, keywords, bounds))
    return params


def _keywords(hint: Any) -> tuple[str, ...]:
    """The words of the Literal in a union such as `int | Literal["auto"]`."""
    words = []
    for arg in typing.get_args(hint):
        if typing.get_origin(arg) is typing.Literal:
            words += [a for a in typing.get_args(arg) if isinstance(a, str)]
    return tuple(words)


def argument_docs(cls: type) -> dict[str, str]:
    """`name: text` entries of the "Args:" section of `cls.__init__`'s docstring (else the
    class docstring), continuation lines joined: Google style, as most Python code has it."""
    docs: dict[str, str] = {}
    for doc in (inspect.getdoc(cls.__init__), inspect.getdoc(cls)):
        lines = (doc or "").splitlines()
        if "Args:" not in [line.strip() for line in lines]:
            continue
        start = [line.strip() for line in lines].index("Args:") + 1
        current, entry_indent = None, None
        for line in lines[start:]:
            if not line.strip():
                break
            indent = len(line) - len(line.lstrip())
            entry = re.match(r"^\s*(\w+)(?: \(.*?\))?:\s*(.*)$", line)
            if entry and (entry_indent is None or indent == entry_indent):
                current, entry_indent = entry.group(1), indent
                docs.setdefault(current, entry.group(2).strip())
            elif current is not None and indent > entry_indent:
                docs[current] = f"{docs[current]} {line.strip()}"
            else:
                break
        if docs:
            return docs
    return docs


def check_method_class(cls: type[FederatedMethod], name: str) -> None:
    """What can be checked without building the method: no Lightning hook is overridden
    that local training would not call, hyperparameters have defaults,
    `upload_keys` is a tuple of patterns (a bare string would match character by character)
    and `tunable` names hyperparameters whose defaults lie in their search ranges."""
    uncalled = [hook for hook in UNCALLED_HOOKS if getattr(cls, hook, None) is not getattr(LightningModule, hook, None)]
    if uncalled:
        raise MethodError(
            f"method {name!r} overrides {', '.join(uncalled)}, which local training (benchmark/federation/client_loop.py) "
            "does not call; move that work into training_step or a hook it calls (on_train_start, "
            "on_train_batch_start, on_before_optimizer_step, ...)"
        )
    keys = cls.upload_keys
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise MethodError(f"method {name!r}: upload_keys must be a tuple of fnmatch patterns, got {keys!r}")
    clashes = sorted({h.name for h in hyperparameters(cls, name)} & reserved_flag_names())
    if clashes:
        # `--beta 0.1` would set the run option and silently leave the hyperparameter at its default.
        raise MethodError(
            f"method {name!r}: hyperparameter {', '.join(map(repr, clashes))} has the name of a run option "
            f"(--{clashes[0].replace('_', '-')}); rename it, e.g. {clashes[0]!r} -> '{name}_{clashes[0]}'"
        )
    defaults = {h.name: h.default for h in hyperparameters(cls, name)}
    _check_tunable(cls, name, defaults)
    _check_ranges(cls, name, defaults)


def _check_tunable(cls: type[FederatedMethod], name: str, defaults: dict) -> None:
    """`tunable`: hyperparameters of the method, each a search space whose range holds its
    default and lies within its `ranges`."""
    for key, space in dict(cls.tunable).items():
        if key not in defaults:
            raise MethodError(
                f"method {name!r}: tunable names {key!r}, which is not one of its hyperparameters "
                f"({', '.join(defaults) or 'none'})"
            )
        if not isinstance(space, (LogUniform, Uniform, Choice)):
            raise MethodError(f"method {name!r}: tunable[{key!r}] must be LogUniform, Uniform or Choice, got {space!r}")
        problem = space.check()
        if problem:
            raise MethodError(f"method {name!r}: tunable[{key!r}] {problem}")
        if not space.contains(defaults[key]):
            raise MethodError(
                f"method {name!r}: the default {key}={defaults[key]!r} lies outside its search range {space}; "
                "the first trial of `fedbench tune` is the default, so widen the range around it"
            )
        bounds = dict(cls.ranges).get(key)
        if bounds is not None and not bounds.covers(space):
            raise MethodError(
                f"method {name!r}: tunable[{key!r}] {space} reaches outside the values {key} may take ({bounds}); "
                "narrow the search range"
            )


def _check_ranges(cls: type[FederatedMethod], name: str, defaults: dict) -> None:
    """`ranges`: numeric hyperparameters of the method, each a valid `Range` that holds its default."""
    kinds = {h.name: h for h in hyperparameters(cls, name)}
    for key, bounds in dict(cls.ranges).items():
        if key not in kinds:
            raise MethodError(
                f"method {name!r}: ranges names {key!r}, which is not one of its hyperparameters "
                f"({', '.join(kinds) or 'none'})"
            )
        if not isinstance(bounds, Range) or kinds[key].type not in (int, float):
            raise MethodError(
                f"method {name!r}: ranges[{key!r}] must be a benchmark.method.Range over a number, got {bounds!r} "
                f"for a {kinds[key].type.__name__}"
            )
        problem = bounds.check()
        if problem:
            raise MethodError(f"method {name!r}: ranges[{key!r}] {problem}")
        if defaults[key] not in kinds[key].keywords and not bounds.contains(defaults[key]):
            raise MethodError(f"method {name!r}: the default {key}={defaults[key]!r} lies outside its range ({bounds})")


def overrides(cls: type[FederatedMethod], hook: str) -> bool:
    """Whether `cls` (or a base between it and FederatedMethod) replaces the default `hook`."""
    return _function(cls, hook) is not _function(FederatedMethod, hook)


def _function(cls: type, name: str) -> Any:
    """The function behind `cls.name`: a classmethod (`fit_to_backbone`) is bound anew on
    every lookup, so it is compared by its `__func__`."""
    value = getattr(cls, name)
    return getattr(value, "__func__", value)


def overridden_hooks(cls: type[FederatedMethod]) -> list[str]:
    return [h for h in HOOKS if overrides(cls, h)]


def _plain_type(hint: Any) -> type:
    # `int | None` -> int, `int | Literal["auto"]` -> int; anything exotic is taken as str on the command line.
    args = [a for a in typing.get_args(hint) if a is not type(None) and typing.get_origin(a) is not typing.Literal]
    if args:
        hint = args[0]
    return hint if hint in (int, float, str, bool) else str
