"""The method registry's lookups: the single source of method names, one floor above the
methods it discovers.

`@register_method("name")` (`benchmark.method_registration`, re-exported here: the name
plugins know) adds a class to `METHODS`, the methods' `benchmark.plugins.Registry`; the
functions here discover the methods first (`METHODS.discover`), and no built-in method
imports this module. Built-ins are the modules of `methods/`; a third-party package
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
import inspect
import re
import sys
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

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
from benchmark.method import FederatedMethod
from benchmark.method_registration import (  # noqa: F401  (re-exported: the names plugins and tests know)
    CLASS_ATTRIBUTES,
    HOOKS,
    METHODS,
    argument_docs,
    check_method_class,
    hyperparameters,
    overridden_hooks,
    overrides,
    register_method,
    reserved_flag_names,
)
from benchmark.plugins import BUILTIN_ORIGIN, import_spec

# The built-in methods: every module of this package (a top-level name: methods/ sits beside
# the layers of benchmark/, and only this module imports it).
BUILTIN_PACKAGE = "methods"
PLUGIN_ERRORS = METHODS.errors  # entry point -> one-line reason it could not be loaded


def available_methods() -> dict[str, type[FederatedMethod]]:
    _load_all()
    return dict(sorted(METHODS.members.items()))


def builtin_methods() -> dict[str, type[FederatedMethod]]:
    """The methods of this repository's methods/ package."""
    return {n: c for n, c in available_methods().items() if c.__module__.split(".")[0] == "methods"}


def method_origin(name: str) -> str:
    _load_all()
    return METHODS.origins[name]


def method_package(name: str) -> str:
    """'distribution==version' of the package that provides method `name`."""
    _load_all()
    return METHODS.packages.get(name, f"fedbench=={_distribution_version('fedbench')}")


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
    before = set(METHODS.members)
    METHODS.origin = f"file {path}"
    try:
        try:
            # the module name FEDBENCH_PLUGINS gives the same file: one module, registered once
            module = import_spec(str(path))
        except MethodError:
            raise
        except Exception as exc:
            raise MethodError(f"method file {path} failed to import: {exc.__class__.__name__}: {exc}") from exc
        if class_name:
            cls = getattr(module, class_name, None)
            if not (isinstance(cls, type) and issubclass(cls, FederatedMethod)):
                raise MethodError(f"{path} has no FederatedMethod subclass {class_name!r}")
            if cls not in METHODS.members.values():
                register_method(_snake_case(class_name))(cls)
            name = cls.name
        else:
            defined = [n for n, c in METHODS.members.items() if c.__module__ == module.__name__]
            if len(defined) != 1:
                raise MethodError(
                    f"{path} registers {len(defined)} methods ({', '.join(defined) or 'none'}); "
                    f"name the class: --method {path_text}:ClassName"
                )
            name = defined[0]
    finally:
        METHODS.origin = BUILTIN_ORIGIN
    for new in set(METHODS.members) - before:
        METHODS.origins[new] = f"file {path}"
        METHODS.packages[new] = f"file {path}"
    _FILES[key] = name
    return name


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def get_method(name: str) -> type[FederatedMethod]:
    if is_method_file(name):
        name = load_method_file(name)
    methods = available_methods()
    if name not in methods:
        raise MethodError(
            METHODS.unknown(
                name,
                "`fedbench methods` describes them. A method of your own: name its file in FEDBENCH_PLUGINS "
                "(FEDBENCH_PLUGINS=path/to/my_method.py fedbench ...), or give the file itself as the method "
                "(--method path/to/my_method.py[:Class]); or put a module decorated with @register_method in "
                "methods/, or install a package with an entry point in the group 'fedbench.methods'.",
            )
        )
    return methods[name]


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
    if method.upload_keys:  # patterns that match nothing would run a purely local method as a federated one
        keys = list(method.state_dict())
        if not any(method.is_uploaded(k) for k in keys):
            raise MethodError(
                f"method {name!r} from {method_origin(name)}: upload_keys {tuple(method.upload_keys)!r} match none of "
                f"its state keys ({_short(keys) or 'it has none'}), so no client would upload anything and the run "
                "would be purely local. Fix the patterns (fnmatch over state_dict() keys), or set upload_keys = () "
                "for a method that keeps everything on the client"
            )
    return method


def _short(keys: list[str], limit: int = 4) -> str:
    return ", ".join(keys[:limit]) + (f", ... (+{len(keys) - limit} more)" if len(keys) > limit else "")


def _load_all() -> None:
    # FEDBENCH_PLUGINS names method files (`path.py` or `path.py:Class`), separated by commas
    # (not by ':', which separates the class).
    METHODS.discover(builtin=BUILTIN_PACKAGE, load_spec=_load_file_module, accept=_accept)


def _load_file_module(spec: str) -> Any:
    return sys.modules[METHODS.members[load_method_file(spec)].__module__]


def _accept(loaded: Any, entry_name: str | None, origin: str) -> None:
    """What a method plugin must be: an entry point names a module that registers a method,
    or a FederatedMethod subclass (registered under the entry point's name unless it is)."""
    if isinstance(loaded, type) and entry_name is not None:
        if not issubclass(loaded, FederatedMethod):
            raise MethodError(
                f"{loaded.__module__}.{loaded.__qualname__} is not a subclass of benchmark.FederatedMethod"
            )
        if loaded not in METHODS.members.values():
            register_method(entry_name)(loaded)
        METHODS.origins[loaded.name] = origin  # the entry point naming a class claims it
    elif not isinstance(loaded, type) and not inspect.ismodule(loaded):
        raise MethodError(f"the entry point must name a module or a FederatedMethod subclass, got {loaded!r}")
    elif inspect.ismodule(loaded) and entry_name is not None:
        defined = [n for n, c in METHODS.members.items() if c.__module__ == loaded.__name__]
        if not defined:
            raise MethodError(
                f"module {loaded.__name__} registered no method: decorate a FederatedMethod subclass "
                "with @register_method, or point the entry point at the class"
            )
        # Another entry point may have imported this module first: the methods defined
        # in a module are credited to the entry point that names the module.
        METHODS.origins.update({n: origin for n in defined})
