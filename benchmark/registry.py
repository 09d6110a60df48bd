"""The method registry: the single source of method names.

Built-ins in `methods/` register with `@register_method("name")`; a third-party package
declares an entry point in the group `fedbench.methods` pointing at its module (importing it
runs its decorators) or at the class (registered under the entry point's name unless it is
already registered). A plugin that fails to load -- import error, not a FederatedMethod, a
hyperparameter without a default, a taken name -- is reported by name and package in
PLUGIN_ERRORS; the others still work. docs/writing-a-method.md is the author's guide.
A method's `__init__` arguments (after `backbone`) are its hyperparameters: `hyperparameters()`
reads them, and the CLI and YAML configs are generated from that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
import typing
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, TypeVar

from lightning import LightningModule

from benchmark.backbone import backbone_shape
from benchmark.config import (
    ENTRY_POINT_GROUP,
    RunConfig,
    parse_bool,  # noqa: F401  (re-exported: methods and tests import it from here)
)
from benchmark.hyperparameters import ROOT as _ROOT
from benchmark.hyperparameters import (  # noqa: F401  (MethodError, convert_value: re-exported)
    Hyperparameter,
    MethodError,
    check_values,
    convert_value,
    is_method_file,
    to_record,
)
from benchmark.hyperparameters import source_digests as _source_digests
from benchmark.method import CONTRACT, UNCALLED_HOOKS, Choice, FederatedMethod, LogUniform, Range, Uniform

# What a method may override and set, read from the contract's one declaration
# (`benchmark.method.CONTRACT`: core, optional settings, capabilities); `fedbench methods
# --describe`, `fedbench new-method` and the docs' contract table are built from it.
HOOKS = tuple(m.name for m in CONTRACT if m.kind == "hook")
CLASS_ATTRIBUTES = tuple(m.name for m in CONTRACT if m.kind == "attribute")
M = TypeVar("M", bound=type[FederatedMethod])

_METHODS: dict[str, type[FederatedMethod]] = {}
_ORIGINS: dict[str, str] = {}
_PACKAGES: dict[str, str] = {}  # method -> 'distribution==version' for entry-point plugins
PLUGIN_ERRORS: dict[str, str] = {}  # entry point -> one-line reason it could not be loaded
_loaded = False
_current_origin = "fedbench"


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
        check_method_class(cls, name)
        cls.name = name
        _METHODS[name] = cls
        _ORIGINS[name] = _current_origin
        return cls

    return decorate


def reserved_flag_names() -> set[str]:
    """Names a hyperparameter may not take: the run options and `fedbench run`'s own flags."""

    from benchmark.protocol import option_owners  # lazy: the protocol registry imports its protocols

    names = set(RunConfig.__dataclass_fields__) | set(option_owners())  # a protocol option is a run flag too
    return names | {"config", "method_help", "protocol_help", "print_config", "help", "force"}


def available_methods() -> dict[str, type[FederatedMethod]]:
    _load_all()
    return dict(sorted(_METHODS.items()))


def builtin_methods() -> dict[str, type[FederatedMethod]]:
    """The methods of this repository's methods/ package."""
    return {n: c for n, c in available_methods().items() if c.__module__.split(".")[0] == "methods"}


def method_origin(name: str) -> str:
    _load_all()
    return _ORIGINS[name]


def method_package(name: str) -> str:
    """'distribution==version' of the package that provides method `name`."""
    _load_all()
    return _PACKAGES.get(name, f"fedbench=={_distribution_version('fedbench')}")


def plugin_packages() -> dict[str, str]:
    """Every installed distribution declaring a fedbench.methods entry point -> its version."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if getattr(ep, "dist", None) is not None:
            found[ep.dist.name] = getattr(ep.dist, "version", None) or "unknown"
    return dict(sorted(found.items()))


def _distribution_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def resolve_method_file(config: RunConfig) -> RunConfig:
    """`config` with a method given as a file (`path.py[:Class]`) named by what the file registers,
    so that run names and identities use the registered name."""
    if not is_method_file(config.method):
        return config
    return dataclasses.replace(config, method=load_method_file(config.method))


_FILES: dict[tuple[str, str], str] = {}  # (resolved path, class) -> registered name


def loaded_method_files() -> list[str]:
    """Every method file this process loaded, as `path[:Class]` specs (absolute paths): a
    sweep's workers load the same files before they run a cell of one of their methods."""
    return [f"{path}:{cls}" if cls else path for path, cls in _FILES]


def load_method_file(spec: str) -> str:
    """Import `path/to/file.py[:Class]` and return the registered name of its method: the
    name its @register_method gives, or, for an undecorated class, the class name in
    snake_case. The cell identity hashes the file, so editing it makes its cells missing."""
    _load_all()
    path_text, _, class_name = spec.rpartition(":") if ".py:" in spec else (spec, "", "")
    path = Path(path_text).expanduser().resolve()
    if not path.is_file():
        raise MethodError(f"method file {path_text!r} does not exist (from --method / FEDBENCH_PLUGINS {spec!r})")
    key = (str(path), class_name)
    if key in _FILES:
        return _FILES[key]
    module_name = f"fedbench_file_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    global _current_origin
    before = set(_METHODS)
    _current_origin = f"file {path}"
    try:
        module = sys.modules.get(module_name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module
            try:
                loader_spec.loader.exec_module(module)
            except MethodError:
                raise
            except Exception as exc:
                del sys.modules[module_name]
                raise MethodError(f"method file {path} failed to import: {exc.__class__.__name__}: {exc}") from exc
        if class_name:
            cls = getattr(module, class_name, None)
            if not (isinstance(cls, type) and issubclass(cls, FederatedMethod)):
                raise MethodError(f"{path} has no FederatedMethod subclass {class_name!r}")
            if cls not in _METHODS.values():
                register_method(_snake_case(class_name))(cls)
            name = cls.name
        else:
            defined = [n for n, c in _METHODS.items() if c.__module__ == module_name]
            if len(defined) != 1:
                raise MethodError(
                    f"{path} registers {len(defined)} methods ({', '.join(defined) or 'none'}); "
                    f"name the class: --method {path_text}:ClassName"
                )
            name = defined[0]
    finally:
        _current_origin = "fedbench"
    for new in set(_METHODS) - before:
        _ORIGINS[new] = f"file {path}"
        _PACKAGES[new] = f"file {path}"
    _FILES[key] = name
    return name


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def get_method(name: str) -> type[FederatedMethod]:
    if is_method_file(name):
        name = load_method_file(name)
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


def check_method_args(name: str, method_args: dict[str, Any] | None) -> dict[str, Any]:
    """`method_args` validated against method `name` and type-converted (nothing is built)."""
    return check_values(name, hyperparameters(get_method(name)), method_args)


def hyperparameter_manifest() -> dict[str, Any]:
    """What methods/hyperparameters.json holds: the built-in methods' hyperparameters as
    their classes say, and the sha256 of each source file they were read from."""
    methods = {name: [to_record(h) for h in hyperparameters(cls)] for name, cls in builtin_methods().items()}
    return {"sources": _source_digests(), "methods": methods}


def stale_manifest() -> list[str]:
    """What is out of date in methods/hyperparameters.json (empty: nothing); see
    `manifest_problems`."""
    import json

    from benchmark.hyperparameters import MANIFEST, manifest_problems  # lazy: only `make test`'s check asks

    try:
        stored = json.loads(MANIFEST.read_text())
    except (OSError, ValueError) as exc:
        return [f"it cannot be read ({exc})"]
    current = json.loads(json.dumps(hyperparameter_manifest()))  # as written: tuples as lists
    return manifest_problems(stored, current["methods"], method_files())


def method_files() -> dict[str, str]:
    """Each built-in method's module file, by its path in the checkout (as the manifest's
    `sources` names it)."""
    return {
        name: Path(inspect.getsourcefile(cls)).resolve().relative_to(_ROOT).as_posix()
        for name, cls in builtin_methods().items()
    }


def fit_method_args(name: str, method_args: dict[str, Any] | None, shape) -> dict[str, Any]:
    """Every hyperparameter of method `name` (defaults filled in, `method_args` validated),
    fitted to the backbone `shape` by the method's `fit_to_backbone`: values relative to
    the backbone resolved, a misfit a MethodError. `shape`: a `BackboneShape`, a built
    `Backbone`, or None when the shape is unknown (the values are then left as they are)."""
    cls = get_method(name)
    resolved = {h.name: h.default for h in hyperparameters(cls)}
    resolved.update(check_method_args(name, method_args))
    if shape is None:
        return resolved
    try:
        fitted = dict(cls.fit_to_backbone(shape, dict(resolved)))
    except MethodError:
        raise
    except ValueError as exc:  # the convention for a hyperparameter that does not fit: say which method
        raise MethodError(f"method {name!r}: {exc}") from exc
    # What the fit changed is checked like a value given by the user (type, range).
    return {
        h.name: resolved[h.name] if value is resolved[h.name] else convert_value(h, value, name)
        for h in hyperparameters(cls)
        for value in [fitted.get(h.name, resolved[h.name])]
    }


def fit_method_args_to(name: str, method_args: dict[str, Any] | None, backbone: str) -> dict[str, Any]:
    """`fit_method_args` against backbone `backbone`'s shape, read from its config (no weights)."""
    return fit_method_args(name, method_args, backbone_shape(backbone))


def build_method(name: str, backbone, method_args: dict[str, Any] | None = None) -> FederatedMethod:
    """Instantiate method `name` with validated, type-converted hyperparameters, fitted to
    `backbone` (every hyperparameter is passed, backbone-relative values resolved)."""
    cls = get_method(name)
    converted = fit_method_args(name, method_args, backbone)
    try:
        method = cls(backbone, **converted)
    except MethodError:
        raise
    except ValueError as exc:  # the convention for a bad hyperparameter value: say which method
        raise MethodError(f"method {name!r}: {exc}") from exc
    if method.trains and not overrides(cls, "configure_optimizers"):
        trainable = [k for k, p in method.named_parameters() if p.requires_grad]
        raise MethodError(
            f"method {name!r} from {method_origin(name)} has trainable parameters ({_short(trainable)}) but does "
            "not override configure_optimizers: return an optimizer over them "
            "(benchmark.optim.sgd_with_cosine), or freeze them with requires_grad=False"
        )
    return method


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


def _short(keys: list[str], limit: int = 4) -> str:
    return ", ".join(keys[:limit]) + (f", ... (+{len(keys) - limit} more)" if len(keys) > limit else "")


def _plain_type(hint: Any) -> type:
    # `int | None` -> int, `int | Literal["auto"]` -> int; anything exotic is taken as str on the command line.
    args = [a for a in typing.get_args(hint) if a is not type(None) and typing.get_origin(a) is not typing.Literal]
    if args:
        hint = args[0]
    return hint if hint in (int, float, str, bool) else str


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    import methods

    # Built-ins are plugins too: one broken module in methods/ must not hide the others.
    for info in pkgutil.iter_modules(methods.__path__):
        module = f"methods.{info.name}"
        _load_plugin(module, "fedbench", lambda module=module: importlib.import_module(module), None)
    # FEDBENCH_PLUGINS: method files (`path.py` or `path.py:Class`), separated by commas
    # (not by ':', which separates the class).
    for spec in filter(None, (s.strip() for s in os.environ.get("FEDBENCH_PLUGINS", "").split(","))):
        _load_plugin(
            f"{spec!r} (FEDBENCH_PLUGINS)",
            f"file {spec}",
            lambda spec=spec: sys.modules[_METHODS[load_method_file(spec)].__module__],
            None,
        )
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        package = ep.dist.name if getattr(ep, "dist", None) is not None else "unknown package"
        before = set(_METHODS)
        _load_plugin(
            f"{ep.name!r} ({ep.value}, package {package})", f"plugin {ep.name!r} (package {package})", ep.load, ep.name
        )
        version = getattr(getattr(ep, "dist", None), "version", None) or "unknown"
        _PACKAGES.update({n: f"{package}=={version}" for n in set(_METHODS) - before})


def _load_plugin(label: str, origin: str, load: Callable[[], Any], entry_name: str | None) -> None:
    """Import one plugin; on any failure record why under `label` and undo its registrations."""
    global _current_origin
    before = set(_METHODS)
    _current_origin = origin
    try:
        loaded = load()  # importing a module runs its @register_method decorators
        if isinstance(loaded, type) and entry_name is not None:
            if not issubclass(loaded, FederatedMethod):
                raise MethodError(
                    f"{loaded.__module__}.{loaded.__qualname__} is not a subclass of benchmark.FederatedMethod"
                )
            if loaded not in _METHODS.values():
                register_method(entry_name)(loaded)
            _ORIGINS[loaded.name] = origin  # the entry point naming a class claims it
        elif not isinstance(loaded, type) and not inspect.ismodule(loaded):
            raise MethodError(f"the entry point must name a module or a FederatedMethod subclass, got {loaded!r}")
        elif (
            inspect.ismodule(loaded)
            and entry_name is not None
            and not any(c.__module__ == loaded.__name__ for c in _METHODS.values())
        ):
            raise MethodError(
                f"module {loaded.__name__} registered no method: decorate a FederatedMethod subclass "
                "with @register_method, or point the entry point at the class"
            )
        if inspect.ismodule(loaded) and entry_name is not None:
            # Another entry point may have imported this module first: the methods defined
            # in a module are credited to the entry point that names the module.
            _ORIGINS.update({n: origin for n, c in _METHODS.items() if c.__module__ == loaded.__name__})
    except Exception as exc:  # a broken plugin must not break the others
        for name in set(_METHODS) - before:
            del _METHODS[name], _ORIGINS[name]
        PLUGIN_ERRORS[label] = f"{exc.__class__.__name__}: {exc}"
    finally:
        _current_origin = "fedbench"
