"""The import rule of `benchmark/` (docs/architecture.md): one direction of imports.

Layers, bottom to top: the top level of `benchmark` (the plugin contract: one module per
file directly under benchmark/), then `federation`, `evaluation`, `runs`, `sweeps`, `cli`.
A module imports only its own layer or layers below; `methods/` and `data/` import only the
top level of `benchmark` (and `data`). A module loaded by name counts as imported
(`importlib.import_module` of a string, a module-level constant or an f-string naming a
package's modules, and a registry's `discover(builtin=...)`); the registries' discovery of
their built-ins may point against the layers (DISCOVERY) but not close a cycle. No import
cycle among the modules of `benchmark` and `data`, type hints' imports included (each
registry's decorator module is imported by its plugins, its lookups one floor up discover
them: `data.registry` and `data.catalog`). No module
imports another module's private name (`from x import _name`): what a module shares is public. Outside
`benchmark/cli/` (whose modules `fedbench --help` imports, so they load torch lazily), an
import inside a function must say why with a `# lazy:` comment."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Collection

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("", "federation", "evaluation", "runs", "sweeps", "cli")
# Imports that point against the layers by design: a registry discovers its built-ins (the
# method registry methods/, the protocol registry the protocols, each module by name). The
# layer rule lets them pass; the cycle check follows them like any import.
DISCOVERY = {("benchmark.registry", "methods"), ("benchmark.protocol_registry", "benchmark.evaluation.protocols")}
# What `import_edges` writes as the source line of a module loaded through importlib.
IMPORTLIB = "(loaded by name through importlib)"
# Edges left out of the cycle check until their module changes (none left).
PENDING: dict[str, set[str]] = {}


def _modules(root: Path) -> dict[str, Path]:
    found = {}
    for top in ("benchmark", "data", "methods"):
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _resolve(name: str, modules: Collection[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root: Path = ROOT, type_only: bool = False) -> list[tuple[str, str, int, bool, str]]:
    """(importer, imported, line, inside a function, source line) for every import between
    the project's modules, the modules loaded by name through importlib included (source
    line: IMPORTLIB); TYPE_CHECKING blocks left out, or (`type_only`) only their imports."""
    modules = _modules(root)
    names = frozenset(modules)
    return [edge for name, path in modules.items() for edge in _file_edges(name, path.read_text(), names, type_only)]


# A file's edges are a function of its text and of the project's module names only: memoized,
# so that test_an_upward_import_and_a_cycle_are_caught, which checks a copy of the tree a
# dozen times with one file changed each time, parses each unchanged file once (5 s a check).
@functools.lru_cache(maxsize=None)
def _file_edges(name: str, text: str, modules: frozenset[str], type_only: bool) -> tuple:
    edges = []
    tree, lines = ast.parse(text), text.splitlines()
    skip, in_function = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if (id(node) in skip) != type_only:
            continue
        for target in sorted(set(importlib_targets(node, name, tree, modules)) - {name}):
            edges.append((name, target, node.lineno, False, IMPORTLIB))
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        else:
            targets = []
        for target in {_resolve(t, modules) for t in targets} - {None, name}:
            edges.append((name, target, node.lineno, id(node) in in_function, lines[node.lineno - 1]))
    return tuple(edges)


def importlib_targets(node: ast.AST, name: str, tree: ast.Module, modules: Collection[str]) -> list[str]:
    """The project modules a call loads by name at run time: `importlib.import_module(X)`,
    and a registry's `builtin=X` (X a package: every module in it, as the registry imports
    them). X is a string, a module-level constant, a tuple of them, or an f-string whose
    text up to the first '.' names a package (`f"{PACKAGE}.{info.name}"`: its modules)."""
    if not isinstance(node, ast.Call):
        return []
    function = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
    named = [node.args[0]] if function == "import_module" and node.args else []
    named += [k.value for k in node.keywords if k.arg == "builtin"]
    found = []
    for expression in named:
        for text, package in _loaded_names(expression, name, tree):
            if package:
                found += [m for m in modules if m.startswith(text + ".") and "." not in m[len(text) + 1 :]]
            target = _resolve(text, modules) if text in modules else None
            found += [target] if target else []
    return found


def _loaded_names(expression: ast.expr, name: str, tree: ast.Module) -> list[tuple[str, bool]]:
    """(dotted name, whether its modules are meant) of what `expression` names, when it can be
    read without running the module; [] for a name made at run time (a user's spec, an entry point)."""
    if isinstance(expression, (ast.Tuple, ast.List)):
        return [found for item in expression.elts for found in _loaded_names(item, name, tree)]
    if isinstance(expression, ast.JoinedStr) and len(expression.values) >= 2:
        head, dot = expression.values[0], expression.values[1]
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and head.value.endswith("."):
            return [(head.value[:-1], True)]
        if isinstance(head, ast.FormattedValue) and isinstance(dot, ast.Constant) and str(dot.value).startswith("."):
            return [(text, True) for text, _ in _loaded_names(head.value, name, tree)]
        return []
    text = _constant(expression, name, tree)
    if text is not None:
        return [(text, True)]
    value = _assigned(expression, tree)
    return _loaded_names(value, name, tree) if value is not None else []


def _constant(expression: ast.expr, name: str, tree: ast.Module) -> str | None:
    """The string `expression` is: a literal or `__name__`."""
    if isinstance(expression, ast.Constant) and isinstance(expression.value, str):
        return expression.value
    if isinstance(expression, ast.Name) and expression.id == "__name__":
        return name
    return None


def _assigned(expression: ast.expr, tree: ast.Module) -> ast.expr | None:
    """The value of a module-level `NAME = value` that `expression` (a name) reads."""
    if not isinstance(expression, ast.Name):
        return None
    for statement in tree.body:
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            if [getattr(t, "id", None) for t in targets] == [expression.id]:
                return statement.value
    return None


def layer(module: str) -> int | None:
    """The layer index of a benchmark module; None for data/ and methods/."""
    parts = module.split(".")
    if parts[0] != "benchmark":
        return None
    return LAYERS.index(parts[1]) if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS) else 0


def violations(root: Path = ROOT) -> list[str]:
    bad, graph = [], {}
    for src, dst, line, lazy, text in import_edges(root):
        where = f"{src} line {line} imports {dst}"
        graph.setdefault(src, set()).add(dst)
        if any(
            src == importer and (dst == package or dst.startswith(package + ".")) for importer, package in DISCOVERY
        ):
            continue
        if layer(src) is None:
            if layer(dst) not in (None, 0) or (src.startswith("data") and dst.startswith("methods")):
                bad.append(f"{where}: methods/ and data/ import only the top level of benchmark")
        elif layer(dst) is None:
            if layer(src) == 0:
                bad.append(f"{where}: the top level of benchmark imports no data/ or methods/ module")
        elif layer(dst) > layer(src):
            bad.append(f"{where}: an import up a layer ({LAYERS[layer(src)] or 'top level'} -> {LAYERS[layer(dst)]})")
        if lazy and not src.startswith("benchmark.cli") and src.startswith("benchmark") and "# lazy:" not in text:
            bad.append(f"{where} inside a function without a `# lazy:` reason")
    # A type hint's import is no import at run time, but a cycle through one is still two
    # modules that cannot be read apart: it counts.
    for src, dst, *_ in import_edges(root, type_only=True):
        graph.setdefault(src, set()).add(dst)
    bad += [
        f"import cycle: {' -> '.join(c)}"
        for c in _cycles(
            {k: v - PENDING.get(k, set()) for k, v in graph.items() if k.startswith(("benchmark", "data"))}
        )
    ]
    return bad + private_imports(root)


def private_imports(root: Path = ROOT) -> list[str]:
    """`from module import _name`, or `module._name` on an imported module, between the
    project's modules (benchmark, data, methods)."""
    modules = _modules(root)
    names = frozenset(modules)
    return [bad for name, path in modules.items() for bad in _file_private_imports(name, path.read_text(), names)]


@functools.lru_cache(maxsize=None)  # as _file_edges: a function of the text and the module names
def _file_private_imports(name: str, text: str, modules: frozenset[str]) -> tuple[str, ...]:
    tree, bad = ast.parse(text), []
    imported: set[str] = set()  # local names bound to one of the project's modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.asname for a in node.names if a.asname and a.name in modules}
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if _resolve(node.module, modules) is None:
            continue  # not one of ours: torch's and Lightning's names are theirs to keep
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                bad.append(f"{name} line {node.lineno} imports the private {node.module}.{alias.name}")
            elif f"{node.module}.{alias.name}" in modules:
                imported.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in imported
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            bad.append(f"{name} line {node.lineno} uses the private {node.value.id}.{node.attr}")
    return tuple(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def test_imports_follow_the_layers():
    assert violations() == []


def test_an_upward_import_and_a_cycle_are_caught(tmp_path):
    for top in ("benchmark", "data", "methods"):
        for path in (ROOT / top).rglob("*.py"):
            copy = tmp_path / path.relative_to(ROOT)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(path.read_text())
    assert violations(tmp_path) == []
    simulator = tmp_path / "benchmark" / "federation" / "simulator.py"
    simulator.write_text(simulator.read_text() + "\nfrom benchmark.runs.runner import run_experiment\n")
    found = violations(tmp_path)
    assert any("an import up a layer (federation -> runs)" in v for v in found), found
    assert any(v.startswith("import cycle:") and "benchmark.federation.simulator" in v for v in found), found
    method = tmp_path / "methods" / "promptfl.py"
    method.write_text(method.read_text() + "\nfrom benchmark.federation import simulator\n")
    assert any(v.startswith("methods.promptfl") for v in violations(tmp_path))
    loader = tmp_path / "data" / "loaders" / "coop.py"  # a loader reading the catalog: the cycle the registry ends
    loader.write_text(loader.read_text() + "\nfrom data.catalog import dataset_info\n")
    assert any(v.startswith("import cycle:") and "data.loaders.coop" in v for v in violations(tmp_path))
    # Loads by name are imports too: the protocol registry discovers the protocols, so a
    # protocol that reads the registry closes a cycle, and so does a type hint's import.
    transfer = tmp_path / "benchmark" / "evaluation" / "protocols" / "transfer.py"
    transfer.write_text(transfer.read_text() + "\nfrom benchmark.protocol_registry import protocol_class\n")
    assert any(
        v.startswith("import cycle: benchmark.evaluation.protocols.transfer -> benchmark.protocol_registry")
        or ("benchmark.protocol_registry -> benchmark.evaluation.protocols.transfer" in v)
        for v in violations(tmp_path)
    ), violations(tmp_path)
    protocol = tmp_path / "benchmark" / "protocol.py"
    protocol.write_text(
        protocol.read_text().replace("if TYPE_CHECKING:\n", "if TYPE_CHECKING:\n    import benchmark.config\n", 1)
    )
    assert any(
        v.startswith("import cycle:") and "benchmark.protocol -> benchmark.config" in v for v in violations(tmp_path)
    )
    optim = tmp_path / "benchmark" / "optim.py"
    optim.write_text(optim.read_text() + '\nRUNNER = "benchmark.runs.runner"\nimportlib.import_module(RUNNER)\n')
    assert any("benchmark.optim line" in v and "top level -> runs" in v for v in violations(tmp_path))
    bare_loop = tmp_path / "benchmark" / "federation" / "bare_loop.py"  # a package's modules, found by name
    bare_loop.write_text(bare_loop.read_text() + '\nimportlib.import_module(f"benchmark.sweeps.{name}")\n')
    assert any("benchmark.federation.bare_loop line" in v and "sweeps.tables" in v for v in violations(tmp_path))
    compare = tmp_path / "benchmark" / "sweeps" / "compare.py"
    compare.write_text(compare.read_text() + "\nfrom benchmark.sweeps.tables import _render\n")
    assert "benchmark.sweeps.compare line" in " ".join(v for v in violations(tmp_path) if "private" in v)
    profile = tmp_path / "benchmark" / "cli" / "commands" / "profile.py"  # `perf` is imported there
    profile.write_text(profile.read_text() + "\nperf._uses_a_private_name\n")
    assert "uses the private perf._uses_a_private_name" in " ".join(violations(tmp_path))


def test_every_module_of_benchmark_is_named_in_the_layer_table():
    # docs/architecture.md's layer table is a reader's map of the code: a module added
    # without a word there is a module a new contributor cannot place. The modules of a
    # one-file-per-member package (a protocol, a federation kind, a subcommand, an executor)
    # are named by their package's entry.
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = "\n".join(line for line in doc.splitlines() if line.startswith("| "))
    named = set(re.findall(r"`([\w.]+)`", table))
    per_member = {("evaluation", "protocols"), ("federation", "servers"), ("cli", "commands")}
    missing = []
    for path in sorted((ROOT / "benchmark").rglob("*.py")):
        parts = path.relative_to(ROOT / "benchmark").with_suffix("").parts
        if parts[-1] == "__init__" or tuple(parts[:2]) in per_member:
            continue
        if parts[:2] == ("sweeps", "executors") and parts[-1] not in ("base", "cells"):
            continue
        if parts[-1] not in named:
            missing.append("/".join(parts) + ".py")
    assert not missing, f"docs/architecture.md's layer table names no row for: {', '.join(missing)}"
