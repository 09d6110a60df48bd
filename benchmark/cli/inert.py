"""Run a listing with the third-party packages inert, then forget every module it imported.

What `fedbench datasets` and `fedbench presets` list (names, folders, protocols, domains,
cell counts) is declared by `@register_dataset` calls and preset files, but the modules that
make those calls import torch, torchvision, open_clip and Lightning at their top (10-20 s
here) for the loaders they define, which a listing never calls. Changing those modules is
not free: a cell's identity hashes its loader's module and everything it imports
(`benchmark.runs.identity`), so lazy imports there would rename every shipped cell.

`call_inert(fn)` runs `fn` with every import that is neither the standard library nor this
project (nor PyYAML, which the presets are read with) answered by an `Inert` stand-in: an
object whose attributes, calls and items are more stand-ins and which a class may take as a
base. The registering modules' own code then runs as it is -- the registries stay the one
source of what exists, nothing is declared twice -- and only what the loaders would do with
torch is skipped. Afterwards every module imported during the call is removed from
`sys.modules` (with the stand-ins and what was built on them), so a later real import starts
afresh: nothing built on a stand-in outlives the call.

It answers only what it can vouch for: `fn`'s result must be plain data (str, int, float,
bool, None and lists, tuples and dicts of them), and any exception, or a stand-in anywhere
in the result, raises `NotInert`; the caller then imports for real (slow, correct). A
process that loaded torch already, or the project's data modules, gets `NotInert` at once:
the stand-ins could meet real modules there.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any, Callable, TypeVar

T = TypeVar("T")

# Imported for real: the project's packages and the few small packages the listings read with.
PROJECT = frozenset({"benchmark", "data", "methods"})
REAL = PROJECT | {"yaml", "_yaml"}


class NotInert(Exception):
    """The listing could not be computed with inert packages; import them for real."""


class Inert:
    """Stands for anything a third-party package would have given: a module attribute, a
    call's result, a decorator, a base class (`class Images(Dataset)` makes a plain class)."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Inert:
        if name.startswith("__") and name.endswith("__"):  # protocols (copy, pickle, ...) find none
            raise AttributeError(name)
        return INERT

    def __call__(self, *args: Any, **kwargs: Any) -> Inert:
        return INERT

    def __getitem__(self, key: Any) -> Inert:
        return INERT

    def __mro_entries__(self, bases: tuple) -> tuple:
        # A base class that is a stand-in (PEP 560) becomes a class of its own each time (two
        # in one class statement are not one base twice) whose missing attributes are this
        # stand-in too: `getattr(Method, "setup", None) is getattr(LightningModule, "setup", None)`
        # holds for a method that overrides no Lightning hook, as with the real packages.
        return (_InertMeta("InertBase", (), {}),)

    def __or__(self, other: Any) -> Inert:  # `Tensor | None` evaluated at import
        return INERT

    __ror__ = __or__

    def __repr__(self) -> str:
        return "<inert>"


INERT = Inert()


class _InertMeta(type):
    """The class of a stand-in base class: what the class lacks, the stand-in gives."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return INERT


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return INERT


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers every import outside the standard library and REAL with an inert module."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top in REAL or top in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _InertModule(spec.name)
        module.__path__ = []  # a package: `import torch.nn.functional` finds its submodules here too
        return module

    def exec_module(self, module) -> None:
        pass


def _project(name: str) -> bool:
    """A module of this project's packages, but not of the command line (which is calling)."""
    return name.partition(".")[0] in PROJECT and not (name == "benchmark.cli" or name.startswith("benchmark.cli."))


def call_inert(fn: Callable[[], T]) -> T:
    """`fn()` computed with third-party packages inert, on fresh imports of the project's
    modules (see the module's docstring); raises NotInert when it cannot vouch for the result."""
    if "torch" in sys.modules:  # real packages are loaded: stand-ins could meet them
        raise NotInert("torch is loaded already")
    # The project's modules loaded so far are set aside, so that registrations made in the
    # call (a protocol, a dataset) land in modules of the call's own and leave with them.
    kept = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _project(n)]}
    before = set(sys.modules)
    finder = _InertFinder()
    sys.meta_path.insert(0, finder)
    try:
        result = fn()
        _check_plain(result)
        return result
    except NotInert:
        raise
    except Exception as exc:  # whatever failed on a stand-in, the real import will do right or say why
        raise NotInert(f"{exc.__class__.__name__}: {exc}") from exc
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            if _project(name) or isinstance(sys.modules[name], _InertModule):
                del sys.modules[name]
        sys.modules.update(kept)


def _check_plain(value: Any) -> None:
    if value is None or isinstance(value, (str, int, float, bool)):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            _check_plain(item)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key)
            _check_plain(item)
        return
    raise NotInert(f"the listing holds {value!r}, not plain data")
