"""What `fedbench methods`, `fedbench datasets` and `fedbench presets` list, read without
importing torch.

The registries stay the one source of what exists: `benchmark.registry` (methods) and
`data.catalog` (datasets) are filled by importing the modules that register, which import
torch and Lightning at their top (10-20 s); a preset's cell count reads the catalog too (a
`targets: lodo` preset has one cell per domain). Without plugins, a listing imports those
modules with every third-party package inert (`benchmark.cli.inert`: stand-ins, forgotten
after the call): their registrations run as written, the loaders and methods are never
called, and the answer comes in a fraction of a second on a fresh clone as on any later
call. Should that fail (a registering module that needs a real package at import), the
registries are read for real.

With plugins (FEDBENCH_PLUGINS / FEDBENCH_DATASETS, the `fedbench.methods` and
`fedbench.datasets` entry points) the registries are read for real, as a plugin is checked
when it loads. What a listing needs of them (names, summaries, folders, cell counts) is then
memoized in the cache folder under a fingerprint of the content of every file that can
register, check or count something (benchmark/ with its presets, methods/, data/, and the
.py files FEDBENCH_PLUGINS / FEDBENCH_DATASETS name): the next listing reads the memo, and
any edit to those files makes it read the registries again. Installed plugins and plugin
modules named by their dotted name live outside what is fingerprinted, so with any of them
that registry is always read, and a listing in which a plugin failed to load is never
memoized. A plugin file is fingerprinted by its own content: a module it imports is not
followed. A process that has loaded a registry already (a test, a notebook, which may have
registered more) reads it, not the memo.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import benchmark
from benchmark.cli.inert import NotInert, call_inert
from benchmark.files import atomic_write, cache_root

MEMO_PREFIX = "listing-"


def cache_folder() -> Path:
    return cache_root()  # the toy world's and the features' (benchmark/files.py)


PLUGIN_VARIABLES = ("FEDBENCH_PLUGINS", "FEDBENCH_DATASETS")


def source_files() -> list[Path]:
    """Every file whose content decides what the registries hold and what a preset expands
    into: benchmark/ (the plugin contract, the protocols, the presets), the built-in methods,
    the dataset side (found without importing them) and the plugin files of PLUGIN_VARIABLES."""
    root = Path(benchmark.__file__).parent
    files = sorted(root.rglob("*.py")) + sorted((root / "presets").glob("*.yaml"))
    for package in ("methods", "data"):
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(Path(location).rglob("*.py"))
    return files + [Path(spec).expanduser().resolve() for spec in plugin_specs() if spec.endswith(".py")]


def plugin_specs(variable: str | None = None) -> list[str]:
    """The specs (module names, .py files) that `variable` (default: every one of
    PLUGIN_VARIABLES) names, as `benchmark.plugins.Registry` splits them."""
    names = PLUGIN_VARIABLES if variable is None else (variable,)
    return [s.strip() for name in names for s in os.environ.get(name, "").split(",") if s.strip()]


def fingerprint(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"(unreadable)")
        digest.update(b"\0")
    return digest.hexdigest()[:20]


def memo_path() -> Path:
    return cache_folder() / f"{MEMO_PREFIX}{fingerprint(source_files())}.json"


def _read_memo(path: Path) -> dict[str, Any]:
    try:
        memo = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(path: Path, section: str, value: Any) -> None:
    """Add `section` to the memo at `path`, replacing memos of older sources. A cache folder
    that cannot be written only costs the next listing its speed."""
    memo = {**_read_memo(path), section: value}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(memo, indent=1, sort_keys=True))
        for old in path.parent.glob(f"{MEMO_PREFIX}*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass


def plugins_installed(variable: str = "FEDBENCH_PLUGINS", group: str | None = None) -> bool:
    """Whether members of a registry may come from outside the fingerprinted files: modules
    named by its environment variable (its .py files are fingerprinted), or entry points of
    its group (the methods' by default)."""
    from importlib.metadata import entry_points

    if group is None:
        from benchmark.config import ENTRY_POINT_GROUP as group

    modules = [spec for spec in plugin_specs(variable) if not spec.endswith(".py")]
    return bool(modules) or bool(list(entry_points(group=group)))


def methods() -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """name -> {'summary': first line of its docstring, 'origin'} for every registered method,
    in name order, and the plugins that failed to load (label -> why)."""
    # Loaded already (a test, a notebook): the live registry, with what was registered in this process.
    live = "benchmark.registry" in sys.modules
    if not live and not plugin_specs("FEDBENCH_PLUGINS") and not plugins_installed():
        try:
            return call_inert(_method_entries), {}
        except NotInert:
            pass  # read for real below
    path = None if live or plugins_installed() else memo_path()
    if path is not None and "methods" in (memo := _read_memo(path)):
        return memo["methods"], {}
    from benchmark import registry

    found = _method_entries(check=False)
    errors = dict(registry.PLUGIN_ERRORS)
    if path is not None and not errors:
        _write_memo(path, "methods", found)
    return found, errors


def _method_entries(check: bool = True) -> dict[str, dict[str, str]]:
    """The listing of the methods registry (`check`: a built-in that failed to load is NotInert)."""
    from benchmark import registry

    found = {
        name: {"summary": summary(cls.__doc__), "origin": registry.method_origin(name)}
        for name, cls in registry.available_methods().items()
    }
    if check and registry.PLUGIN_ERRORS:
        raise NotInert(f"methods that did not load: {registry.PLUGIN_ERRORS}")
    return found


def presets() -> list[tuple[str, int, str]]:
    """(name, cells, title) of every built-in preset, in name order: the cells `reproduce`
    expands it into (msst targets included), which needs the dataset catalog (torch)."""
    registry = sys.modules.get("data.registry")
    live = registry is not None and registry.DATASETS.loaded  # loaded already: it may hold more
    if not live and not plugin_specs() and not plugins_installed(*DATASET_PLUGINS) and not plugins_installed():
        try:
            return [tuple(row) for row in call_inert(_preset_rows)]
        except NotInert:
            pass  # read for real below
    path = None if live or plugins_installed(*DATASET_PLUGINS) or plugins_installed() else memo_path()
    if path is not None and "presets" in (memo := _read_memo(path)):
        return [tuple(row) for row in memo["presets"]]
    found = _preset_rows(check=False)
    if path is not None:
        _write_memo(path, "presets", [list(row) for row in found])
    return found


def _preset_rows(check: bool = True) -> list[tuple[str, int, str]]:
    """(name, cells, title) of every preset (`check`: a built-in dataset that failed to load is NotInert)."""
    from benchmark.sweeps.presets import available_presets, load_preset

    found = []
    for name in available_presets():
        preset = load_preset(name)
        found.append((name, preset.cell_count(), preset.title))
    if check:
        _check_datasets_loaded()
    return found


def _check_datasets_loaded() -> None:
    registry = sys.modules.get("data.registry")
    if registry is not None and registry.DATASETS.errors:
        raise NotInert(f"datasets that did not load: {registry.DATASETS.errors}")


def summary(doc: str | None) -> str:
    lines = (doc or "").strip().splitlines()
    return lines[0] if lines else ""


DATASET_PLUGINS = ("FEDBENCH_DATASETS", "fedbench.datasets")  # data.registry's variable and group


def datasets() -> dict[str, dict[str, Any]]:
    """name -> {'folder', 'placements', 'protocol', 'generated', 'origin'} for every registered
    dataset, in registration order (the order `fedbench datasets` prints); `placements` lists
    every [folder, whose layout] the suite looks in (`DatasetInfo.placements`), `origin` where
    the dataset came from ('fedbench', or the plugin's module, file or entry point)."""
    registry = sys.modules.get("data.registry")
    live = registry is not None and registry.DATASETS.loaded  # loaded already: it may hold more
    if not live and not plugin_specs("FEDBENCH_DATASETS") and not plugins_installed(*DATASET_PLUGINS):
        try:
            return call_inert(_dataset_entries)
        except NotInert:
            pass  # read for real below
    path = None if live or plugins_installed(*DATASET_PLUGINS) else memo_path()
    if path is not None and "datasets" in (memo := _read_memo(path)):
        return {name: entry for name, entry in memo["datasets"]}
    from data.registry import DATASETS

    found = _dataset_entries(check=False)
    if path is not None and not DATASETS.errors:
        _write_memo(path, "datasets", [[name, entry] for name, entry in found.items()])  # a list keeps the order
    return found


def _dataset_entries(check: bool = True) -> dict[str, dict[str, Any]]:
    """The listing of the datasets registry (`check`: a built-in that failed to load is NotInert)."""
    from data.catalog import all_datasets
    from data.registry import DATASETS

    found = {name: listing_entry(info, DATASETS.origins.get(name, "fedbench")) for name, info in all_datasets().items()}
    if check:
        _check_datasets_loaded()
    return found


def dataset_plugin_errors() -> dict[str, str]:
    """The dataset plugins that failed to load (label -> why); empty when the registry was
    not read in this process (a listing from the memo: no plugin to fail)."""
    registry = sys.modules.get("data.registry")
    return dict(registry.DATASETS.errors) if registry is not None else {}


def listing_entry(info, origin: str = "fedbench") -> dict[str, Any]:
    """What a listing needs of a `DatasetInfo`, as JSON."""
    return {
        "folder": info.folder,
        "placements": [list(p) for p in info.placements],
        "protocol": info.protocol,
        "generated": info.generated,
        "origin": origin,
    }
