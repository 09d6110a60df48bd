"""The one registry mechanism of methods, protocols and datasets (as timm's `_registry`).

Each kind has one `Registry`, held by the module its plugins import for their decorator
(`@register_method`: `benchmark.method_registration`, `@register_protocol`:
`benchmark.protocol`, `@register_dataset`: `data.registry`). Decorating adds a member;
nothing there imports a plugin. The kind's lookups live one floor up, in a module the
plugins never import (`benchmark.registry`, `benchmark.protocol_registry`, `data.catalog`),
which calls `discover` before it reads: the built-ins (a package: each of its modules, one
at a time; a module), the specs of an environment variable (module names or .py files,
separated by commas) and the entry points of a group, in that order. So registration runs
one way and the registries take part in no import cycle (tests/system/test_layers.py
follows `builtin=` as the imports it is).

A plugin that fails to load is recorded by label in `errors` with its registrations undone;
the others still load. No torch here: `fedbench --help` and the listings read registries.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import os
import pkgutil
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from benchmark.errors import SetupWarning

T = TypeVar("T")
BUILTIN_ORIGIN = "fedbench"
# accept(loaded, entry point name or None, origin): what a kind checks of a loaded plugin
# (an entry point naming a class registers it under the entry point's name, say).
Accept = Callable[[Any, "str | None", str], None]


class Registry(Generic[T]):
    """name -> member of one kind, where each member came from (`origins`), the package and
    version of those from an installed distribution (`packages`) and the plugins that could
    not be loaded (`errors`: label -> one-line reason)."""

    def __init__(self, kind: str, *, group: str, variable: str, error: type[Exception] = ValueError) -> None:
        self.kind = kind
        self.group = group  # the entry-point group: fedbench.methods, fedbench.protocols, fedbench.datasets
        self.variable = variable  # the environment variable naming more plugins
        self.error = error  # what a taken name raises
        self.members: dict[str, T] = {}
        self.origins: dict[str, str] = {}
        self.packages: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.loaded = False
        self.origin = BUILTIN_ORIGIN  # where the plugin loading now comes from

    def add(self, name: str, member: T) -> None:
        """Register `member` as `name`, credited to the plugin now loading; a name taken by
        another member is `self.error`."""
        if name in self.members and self.members[name] is not member:
            raise self.error(self.taken(name))
        self.members[name] = member
        self.origins[name] = self.origin

    def taken(self, name: str) -> str:
        """The message for a second member under `name`, naming both sources."""
        return (
            f"{self.kind} name {name!r} from {self.origin} is already registered by "
            f"{self.origins.get(name, 'fedbench')}; choose another name"
        )

    def remove(self, name: str) -> None:
        self.members.pop(name, None)
        self.origins.pop(name, None)
        self.packages.pop(name, None)

    def discover(
        self,
        builtin: str | tuple[str, ...],
        *,
        load_spec: Callable[[str], Any] | None = None,
        accept: Accept | None = None,
    ) -> None:
        """Load every plugin once: `builtin` (packages: each module; modules), then the specs
        of `self.variable` (`load_spec`, by default a module name or a .py file), then the
        entry points of `self.group`. `accept` checks what each loaded (see `Accept`)."""
        if self.loaded:
            return
        self.loaded = True
        for name in (builtin,) if isinstance(builtin, str) else builtin:
            for module in self._modules(name):
                self.load_plugin(module, BUILTIN_ORIGIN, lambda module=module: importlib.import_module(module))
        for spec in filter(None, (s.strip() for s in os.environ.get(self.variable, "").split(","))):
            where = f"file {spec}" if spec.endswith(".py") or ".py:" in spec else f"module {spec}"
            label = f"{spec!r} ({self.variable})"
            self.load_plugin(label, where, lambda spec=spec: (load_spec or import_spec)(spec), None, accept)
            if label in self.errors:  # the user named it: a command must not run as if it were not set
                warnings.warn(
                    f"{self.kind} plugin {label} failed to load ({self.errors[label]}); this command runs without "
                    f"it: fix the file or take it out of {self.variable}",
                    SetupWarning,
                    stacklevel=2,
                )
        for ep in entry_points(group=self.group):
            package = ep.dist.name if getattr(ep, "dist", None) is not None else "unknown package"
            before = set(self.members)
            self.load_plugin(
                f"{ep.name!r} ({ep.value}, package {package})",
                f"plugin {ep.name!r} (package {package})",
                ep.load,
                ep.name,
                accept,
            )
            version = getattr(getattr(ep, "dist", None), "version", None) or "unknown"
            self.packages.update({n: f"{package}=={version}" for n in set(self.members) - before})

    @staticmethod
    def _modules(name: str) -> list[str]:
        """`name` when it is a module; each module of it, in name order, when it is a package."""
        spec = importlib.util.find_spec(name)
        if spec is None or spec.submodule_search_locations is None:
            return [name]
        return [f"{name}.{info.name}" for info in pkgutil.iter_modules(spec.submodule_search_locations)]

    def load_plugin(
        self,
        label: str,
        origin: str,
        load: Callable[[], Any],
        entry_name: str | None = None,
        accept: Accept | None = None,
    ) -> None:
        """Import one plugin (its decorators register it), credited to `origin`; on any
        failure record why under `label` and undo what it registered."""
        before = set(self.members)
        self.origin = origin
        try:
            loaded = load()
            if accept is not None:
                accept(loaded, entry_name, origin)
        except Exception as exc:  # one broken plugin must not hide the others
            for name in set(self.members) - before:
                self.remove(name)
            self.errors[label] = f"{exc.__class__.__name__}: {exc}"
        finally:
            self.origin = BUILTIN_ORIGIN

    def unknown(self, name: str, how_to_add: str) -> str:
        """The message for a name nobody registered: the registered ones, how to add one, and
        the plugins that failed to load."""
        broken = "".join(f"\n  plugin {label}: {why}" for label, why in self.errors.items())
        close = difflib.get_close_matches(name, list(self.members), n=1)
        return (
            f"unknown {self.kind} {name!r}{f' (did you mean {close[0]!r}?)' if close else ''}. Registered {self.kind}s: {', '.join(sorted(self.members)) or 'none'}. "
            f"{how_to_add}" + (f"\nPlugins that failed to load:{broken}" if broken else "")
        )


def import_spec(spec: str) -> Any:
    """A module by its dotted name, or a .py file imported under a name of its own (its stem
    and a hash of its path, so two files of one name stay two modules)."""
    if not spec.endswith(".py"):
        return importlib.import_module(spec)
    path = Path(spec).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no file {path} (named in a plugin list)")
    name = f"fedbench_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
