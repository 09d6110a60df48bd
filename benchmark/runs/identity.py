"""A cell's identity: everything that determines its numbers, hashed into its run name.

A finished run folder is reused by `fedbench reproduce` only when its identity is the
one asked for now, so a result can never be stale without the folder name saying so:
  run       the RunConfig fields that change results, with the method's hyperparameters
            *resolved* (every default written out, so a changed default is a new cell);
  method    the class, the hash of the source files it is defined in (the class and its
            bases up to FederatedMethod), the hash of their modules and every project
            module those import, and, for a plugin, its package and version;
  framework the hash of the code every cell's numbers pass through: the run's flow
            (`FRAMEWORK_ROOTS`: the simulator, client loop, evaluation, backbone, data
            pipeline, partitions and few-shot sampling it imports), the protocol's module
            and every project module they import, so a fix there reruns every cell instead
            of mixing old and new numbers in one table;
  weights   the backbone (with its model config file for the suite's own architectures) and
            the identity of its weights (a built checkpoint's sha256 for
            the suite's own weights such as the toy CLIP, shipped in data/toy/checkpoints so that
            every machine loads the same file; a checkpoint file's sha256; an open_clip tag);
  data      per dataset, its loader's module and every project module that imports (and the
            generator's package for a generated dataset), and the sha256 of every file a load
            reads besides the images (split files, class-name files: `DatasetInfo.data_files`);
            for a method that reads class attributes, the attribute file's sha256 and the sentence
            frames it is read with (the dataset's and each domain's: `sentence_frames`).
"Every project module they import" is the closure of the imports within benchmark/, data/
and methods/, read from the modules' syntax trees (`project_imports`): a helper that a
loader calls (data/loaders/split_zhou.py for DTD) is part of every cell that loads through
it, and no hand-kept list can fall behind the code.
Source code is hashed by its syntax tree without docstrings: editing a comment, a docstring
or the layout keeps every cell; any change to the code makes new ones. Data files are hashed
by their bytes.
Settings that cannot change a number (paths -- the data root and the attribute folder name
places; the files read there are hashed --, device, W&B, evaluation batch size) are left
out: the run options marked `identity: False` (`benchmark.config.MARKS`).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import yaml

import data.toy  # noqa: F401  (registers the toy CLIP's weights and their identity)
from benchmark.backbone_weights import CONFIG_DIR, PRETRAINED_CACHED, PRETRAINED_IDENTITIES, PRETRAINED_PROVIDERS
from benchmark.config import IDENTITY_KEY, RunConfig
from benchmark.federation.servers import federation_label
from benchmark.files import atomic_write, cache_root
from benchmark.method import FederatedMethod
from benchmark.protocol_registry import available_protocols, protocol_class
from benchmark.registry import MethodError, fit_method_args_to, get_method, method_package
from benchmark.runs.numerics import numerics_identity, run_name_part
from data.attributes import ATTRIBUTE_GENERATORS, attribute_file, attributes_dir, sentence_frames
from data.catalog import dataset_info, resolve_data_root

ROOT = Path(__file__).resolve().parents[2]
# The project's own packages: the import graph followed into the identity stays within them.
PROJECT_PACKAGES = ("benchmark", "data", "methods")
# The run's flow from a config to its numbers: with the modules it imports, the code every
# cell's numbers pass through.
FRAMEWORK_ROOTS = ("benchmark.runs.runner",)
# Imports that only make plugins register: this module imports the toy CLIP's weights
# provider (a cell using them names them by their recipe and bytes: `weights`). (The catalog
# discovers the loaders by name, which this graph does not follow: a cell passes through the
# one loader it uses, a root of its own.)
DISCOVERY_IMPORTS = frozenset(
    {
        ("benchmark.runs.identity", "data.toy"),
        ("benchmark.runs.prechecks", "data.toy"),
    }
)


def cell_identity(config: RunConfig) -> dict[str, Any]:

    try:
        method_args = resolved_method_args(config.method, config.method_args, config.backbone)
        method = method_version(config.method)
    except MethodError as exc:
        # A cell that cannot run (e.g. a preset naming a method not installed here) still has
        # a name, so a dry run can list it; `validate_run` refuses to run it.
        method_args, method = dict(config.method_args), {"unavailable": str(exc).splitlines()[0]}
    root = resolve_data_root(config.data_root)
    data = [data_identity(name, root) for name in config.datasets + config.test_datasets]
    if _reads_attributes(config.method):
        data[0]["attributes_sha256"] = _attributes_sha256(config, root)
        data[0]["sentence_frames"] = sentence_frames(config.dataset)
    source = {"source_run": Path(config.evaluate_from).name} if config.evaluate_from else {}
    return {
        # `precision` and `augment_backend` resolved (`auto` -> what this machine runs): a bf16
        # cell and a 32-true cell of one config are two cells (benchmark.runs.numerics)
        "run": {**config.result_key(), **numerics_identity(config), "method_args": method_args},
        **source,  # `fedbench evaluate`: the run folder (named by its own identity's hash) whose clients are scored
        "method": method,
        "framework": modules_sha256((*FRAMEWORK_ROOTS, *_protocol_module(config.protocol))),
        "weights": weights_identity(config.backbone, config.pretrained),
        "data": data,
    }


def _protocol_module(protocol: str) -> tuple[str, ...]:
    protocols = available_protocols()
    return (protocols[protocol].__module__,) if protocol in protocols else ()


def _reads_attributes(method: str) -> bool:
    try:
        return get_method(method).uses_class_attributes
    except MethodError:
        return False


def _attributes_sha256(config: RunConfig, root: Path) -> str:
    """The sha256 of the attribute file the run will read (as `load_class_attributes` finds
    it); a generated dataset's file is written from its generator's code, hashed with the
    dataset, unless --attributes names a folder."""
    dataset = config.datasets[0]
    if not config.attributes and dataset in ATTRIBUTE_GENERATORS:
        return "generated"
    return _data_file_sha256(attribute_file(attributes_dir(root, config.attributes), dataset))


def identity_hash(identity: dict[str, Any]) -> str:
    payload = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(payload).hexdigest()[:10]


def resolved_method_args(method: str, method_args: dict[str, Any], backbone: str) -> dict[str, Any]:
    """Every hyperparameter of `method`: its defaults, overridden by `method_args` (validated),
    with values relative to the backbone resolved against `backbone`'s shape (pFedMMA's
    `first_block: auto`), so that a run records, and its cell hashes, what it runs."""

    return {k: _plain(v) for k, v in fit_method_args_to(method, method_args, backbone).items()}


def method_version(name: str) -> dict[str, Any]:

    cls = get_method(name)
    files, modules = [], []
    for klass in cls.__mro__:
        if klass is FederatedMethod or not issubclass(klass, FederatedMethod):
            break
        files.append(_source_of(klass))
        modules.append(klass.__module__)
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "source_sha256": hashlib.sha256("\n".join(dict.fromkeys(files)).encode()).hexdigest()[:16],
        "modules_sha256": modules_sha256(tuple(dict.fromkeys(modules))),
        "package": method_package(name),
    }


def weights_identity(backbone: str, pretrained: str) -> str:
    """A string that changes whenever the weights do, computed without building anything."""

    config_file = CONFIG_DIR / f"{backbone}.json"
    if config_file.is_file():  # the suite's own architectures: the file is the model
        backbone = f"{backbone}(config sha256:{_data_file_sha256(config_file)})"
    if pretrained in ("", "none", None):
        return f"{backbone}@random(seed 0)"

    if pretrained in PRETRAINED_IDENTITIES:
        named = f"{backbone}@{pretrained}:{PRETRAINED_IDENTITIES[pretrained]()}"
        if pretrained not in PRETRAINED_CACHED:
            return named
        # The suite's own weights are built on the user's machine, and the build's float
        # rounding depends on it: name the bytes, once they exist (`prepare_weights` builds
        # them before a run or sweep names its cells).
        path = PRETRAINED_CACHED[pretrained]()
        return f"{named} sha256:{_checkpoint_sha256(path)}" if path is not None else f"{named} (not built yet)"
    path = Path(pretrained).expanduser()
    if path.is_file():
        return f"{backbone}@file sha256:{_checkpoint_sha256(path)}"
    return f"{backbone}@{pretrained}"  # an open_clip tag names fixed published weights


def _checkpoint_sha256(path: Path) -> str:
    stat = path.stat()
    return _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def data_identity(dataset: str, root: Path | None = None) -> dict[str, Any]:
    """The dataset's code (its loader's module and the project modules it imports) and, with
    `root` (the data root), the sha256 of every file a load reads there besides the images."""
    info = dataset_info(dataset)
    loader_module = info.loader.__module__
    identity: dict[str, Any] = {"dataset": dataset, "loader_sha256": modules_sha256((loader_module,))}
    if info.generated:  # a generated dataset is its generator's code: the whole package it lives in
        package = loader_module.rpartition(".")[0]
        identity["generator_sha256"] = modules_sha256(
            tuple(m for m in _project_modules() if m == package or m.startswith(package + "."))
        )
    if root is not None and info.data_files is not None:
        folder = info.path(root)
        identity["files"] = {p.relative_to(folder).as_posix(): _data_file_sha256(p) for p in info.data_files(folder)}
    return identity


def prepare_data(config: RunConfig) -> bool:
    """Write the files that the first load of the config's datasets would make (the suite's
    DomainBed splits), so that its cells are named by the files they will read. Returns
    whether it wrote any (cell names computed before then are stale)."""
    root, wrote = resolve_data_root(config.data_root), False
    for name in config.datasets + config.test_datasets:
        info = dataset_info(name)
        folder = info.path(root)
        if info.prepare is None or not folder.is_dir():
            continue  # a missing dataset fails its load with the steps to get it
        missing = [p for p in info.data_files(folder) if not p.exists()] if info.data_files else []
        info.prepare(folder)
        wrote = wrote or any(p.exists() for p in missing)
    return wrote


def _data_file_sha256(path: Path) -> str:
    # Keyed by size and modification time, not read once per process like code: a run loads
    # its data when it starts, so a file changed on disk changes the cells named after it.
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    return _file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


def prepare_weights(pretrained: str | None) -> bool:
    """Build the suite's own weights named by `pretrained` (e.g. the toy CLIP) if they are not
    cached yet, so that the cells about to run are named by the bytes they will load.
    Returns whether it built them (cell names computed before then are stale)."""

    if pretrained not in PRETRAINED_PROVIDERS:
        return False
    missing = pretrained in PRETRAINED_CACHED and PRETRAINED_CACHED[pretrained]() is None
    PRETRAINED_PROVIDERS[pretrained]()
    return missing


def _source_of(klass: type) -> str:
    try:
        return _code(Path(inspect.getsourcefile(klass)))
    except (TypeError, OSError):
        # A class made at run time (no file): its qualified name is all there is to hash.
        return f"<no source file: {klass.__module__}.{klass.__qualname__}>"


@functools.lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def forget_sources() -> None:
    """Read source files again, as a new process would (the caches of the sources, of the
    import graph and of the modules' hashes)."""
    for cached in (_source, _code, _project_modules, _module_imports, modules_sha256):
        cached.cache_clear()


@functools.lru_cache(maxsize=1)
def _project_modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the project's packages under ROOT."""
    found = {}
    for package in PROJECT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _module_file(name: str) -> Path | None:
    """A project module's file under ROOT; for another module (a plugin's), its own file."""
    if name in _project_modules():
        return _project_modules()[name]
    try:
        return Path(inspect.getsourcefile(sys.modules[name]))
    except (KeyError, TypeError):  # not imported, built in, or made at run time: no file to hash
        return None


@functools.lru_cache(maxsize=None)
def _module_imports(name: str) -> tuple[str, ...]:
    """The project modules `name` imports, at its top or inside a function (that code runs
    too); imports under `if TYPE_CHECKING:` and discovery imports left out."""
    path, modules = _module_file(name), _project_modules()
    if path is None:
        return ()
    text = _source(path)
    # What a text imports, among the same project modules, is always the same (see `_stored`).
    key = "\0".join([name, path.name, text, *sorted(modules), *(f"{a}>{b}" for a, b in sorted(DISCOVERY_IMPORTS))])
    found = _stored("module-imports", key, lambda: json.dumps(_imports_of(name, path, text, modules)))
    return tuple(json.loads(found))


def _imports_of(name: str, path: Path, text: str, modules) -> list[str]:
    """`_module_imports`, computed from the module's text."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = {id(n) for node in ast.walk(tree) if _is_type_checking(node) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 packages
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            # `from a import b` imports the module a.b if there is one, else a name of a
            targets = [f"{base}.{alias.name}" for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and (name, target) not in DISCOVERY_IMPORTS:
                found.add(target)
    return sorted(found)


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def project_imports(roots: tuple[str, ...]) -> list[str]:
    """`roots` and every project module they import, directly or through others, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(_module_imports(name))
    return sorted(seen)


@functools.lru_cache(maxsize=256)
def modules_sha256(roots: tuple[str, ...]) -> str:
    """The hash of the code of `roots` and of every project module they import; computed once
    per process for a set of roots."""
    digest = hashlib.sha256()
    for name in project_imports(roots):
        # Import first, so the code hashed is the code this process runs (a module imported
        # later would be read from disk later, possibly after an edit).
        try:
            importlib.import_module(name)
        except ImportError:  # an optional dependency missing here: the cell cannot run here anyway
            pass
        path = _module_file(name)
        digest.update(name.encode())
        digest.update(_code(path).encode() if path is not None else b"<no source file>")
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def _source(path: Path) -> str:
    return path.read_text(errors="replace")


@functools.lru_cache(maxsize=512)
def _code(path: Path) -> str:
    """The code of a Python file without comments, docstrings and layout (its syntax tree);
    any other file as it is.

    Read once per process: a process runs the code it loaded, so a file edited while it
    runs (a sweep of hours) must not rename its later cells -- they would file results of
    the old code under the new code's name, and its table would miss the earlier cells.
    The next process reads the edit and names new cells."""
    text = _source(path)
    if path.suffix != ".py":
        return text
    return _stored("code-trees", text, lambda: _code_tree(text))


def _stored(kind: str, key: str, compute) -> str:
    """`compute()`, kept in the cache folder under the hash of `key` and the Python version.
    The tree of one text under one Python is always the same, so a run does not parse its
    ~70 modules again before its first round (seconds on a busy CPU); a cache folder that
    cannot be written costs the next run that speed only."""
    folder = cache_root() / kind / f"py{sys.version_info[0]}.{sys.version_info[1]}"
    stored = folder / f"{hashlib.sha256(key.encode()).hexdigest()}.txt"
    try:
        return stored.read_text()
    except OSError:
        pass
    value = compute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write(stored, value)
    except OSError:
        pass
    return value


def _code_tree(text: str) -> str:
    """`_code` of a Python file's `text`, computed."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, include_attributes=False)


def _plain(value: Any) -> Any:
    """YAML/JSON-safe: tuples become lists."""
    return list(value) if isinstance(value, tuple) else value


def cell_hash(config: RunConfig) -> str:
    """The hash of `config`'s cell identity: the last part of its run name."""
    return identity_hash(cell_identity(config))


def resolved_config(config: RunConfig) -> RunConfig:
    """A copy whose method_args hold every hyperparameter of the method, defaults included."""
    return dataclasses.replace(
        config, method_args=resolved_method_args(config.method, config.method_args, config.backbone)
    )


def run_name(config: RunConfig) -> str:
    """The run folder's name: what a reader needs to tell cells apart, then the cell hash."""
    # Several datasets make a long name: count them instead (the hash keeps names unique).
    datasets = config.dataset if len(config.datasets) <= 2 else f"{config.datasets[0]}+{len(config.datasets) - 1}more"
    part = protocol_class(config.protocol).run_name_part(config.protocol_args)
    # the rows around a federation, said in the name (absent for the default: names as before)
    federation = f"_{label}" if (label := federation_label(config.federation)) else ""
    finetuned = f"_ft{config.finetune_epochs}" if config.finetune_epochs else ""
    evaluated = "_evaluated" if config.evaluate_from else ""
    numerics = run_name_part(config)  # `_bf16`, `_fp16`, `_fp32tf32`; absent for fp32 (names as before)
    return (
        f"{config.method}{federation}{finetuned}{evaluated}_{datasets}{part}_{config.protocol}_{config.shots}shot"
        f"_seed{config.seed}{numerics}_{cell_hash(config)}"
    )


def save_yaml(config: RunConfig, path: Path) -> None:
    """The resolved config (every method hyperparameter) and, under `identity:`, the rest of
    the cell's identity; `fedbench run --config` accepts the file back as it is."""
    identity = cell_identity(config)
    data = {**resolved_config(config).to_dict(), IDENTITY_KEY: {k: v for k, v in identity.items() if k != "run"}}
    data[IDENTITY_KEY]["hash"] = identity_hash(identity)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
