"""A cell's identity: everything that determines its numbers, hashed into its run name.

A finished run folder is reused by `fedbench reproduce` only when its identity is the
one asked for now, so a result can never be stale without the folder name saying so:
  run       the RunConfig fields that change results, with the method's hyperparameters
            *resolved* (every default written out, so a changed default is a new cell);
  method    the class, the hash of the source files it is defined in (the class and its
            bases up to FederatedMethod) and, for a plugin, its package and version;
  framework the hash of the shared code every cell's numbers pass through (the simulator,
            backbone, evaluation, optimizer schedules, data pipeline: FRAMEWORK_CODE), so a
            fix there reruns every cell instead of mixing old and new numbers in one table;
  weights   the backbone and the identity of its weights (a built checkpoint's sha256 for
            the suite's own weights such as the toy CLIP, shipped in data/toy/checkpoints so that
            every machine loads the same file; a checkpoint file's sha256; an open_clip tag);
  data      the dataset's loader code (and the generator for a generated dataset) and the
            partition / few-shot sampling code.
Source code is hashed by its syntax tree without docstrings: editing a comment, a docstring
or the layout keeps every cell; any change to the code makes new ones.
Settings that cannot change a number (paths, device, W&B, evaluation batch size) are
left out: see `RunConfig.NON_RESULT_FIELDS`.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

import yaml

import data.toy  # noqa: F401  (registers the toy CLIP's weights and their identity)
from benchmark.backbone import PRETRAINED_CACHED, PRETRAINED_IDENTITIES, PRETRAINED_PROVIDERS
from benchmark.config import IDENTITY_KEY, RunConfig
from benchmark.method import FederatedMethod
from benchmark.registry import MethodError, fit_method_args_to, get_method, method_package
from data.catalog import dataset_info

ROOT = Path(__file__).resolve().parents[2]
# The code that turns a dataset into client shards; a change there changes every partition.
PARTITION_CODE = ("data/partition.py", "data/fewshot.py")
# The shared code between a config and its numbers (method and dataset code is hashed per cell).
FRAMEWORK_CODE = (
    "benchmark/backbone.py",
    "benchmark/federation/client_loop.py",
    "benchmark/evaluation/accuracy.py",
    "benchmark/federation/features.py",
    "benchmark/federation/simulator.py",
    "benchmark/method.py",
    "benchmark/optim.py",
    "benchmark/prompts.py",
    "benchmark/evaluation/protocols.py",
    "benchmark/runs/runner.py",
    "benchmark/shortcuts.py",
    "data/base.py",
    "data/combined.py",
    "data/transforms.py",
    "data/validation.py",
)


def cell_identity(config: RunConfig) -> dict[str, Any]:

    try:
        method_args = resolved_method_args(config.method, config.method_args, config.backbone)
        method = method_version(config.method)
    except MethodError as exc:
        # A cell that cannot run (e.g. a preset naming a method not installed here) still has
        # a name, so a dry run can list it; `validate_run` refuses to run it.
        method_args, method = dict(config.method_args), {"unavailable": str(exc).splitlines()[0]}
    return {
        "run": {**config.result_key(), "method_args": method_args},
        "method": method,
        "framework": _framework_sha256(tuple(FRAMEWORK_CODE)),
        "weights": weights_identity(config.backbone, config.pretrained),
        "data": [data_identity(name) for name in config.datasets + config.test_datasets],
    }


@functools.lru_cache(maxsize=8)
def _framework_sha256(files: tuple[str, ...]) -> str:
    # Import the modules first, so the code hashed is the code this process runs (a module
    # imported later would be read from disk later, possibly after an edit). Sources are
    # read once per process (`_code`), so the hash is computed once, not once per cell.
    for name in files:
        path = Path(name)
        if not path.is_absolute():
            importlib.import_module(".".join(path.with_suffix("").parts))
    return _files_sha256([ROOT / f for f in files])


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
    files = []
    for klass in cls.__mro__:
        if klass is FederatedMethod or not issubclass(klass, FederatedMethod):
            break
        files.append(_source_of(klass))
    return {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "source_sha256": hashlib.sha256("\n".join(dict.fromkeys(files)).encode()).hexdigest()[:16],
        "package": method_package(name),
    }


def weights_identity(backbone: str, pretrained: str) -> str:
    """A string that changes whenever the weights do, computed without building anything."""

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


def data_identity(dataset: str) -> dict[str, Any]:

    info = dataset_info(dataset)
    loader_file = Path(inspect.getsourcefile(info.loader))
    # A generated dataset is its generator's code: hash the whole package it lives in.
    files = sorted(loader_file.parent.glob("*.py")) if info.generated else [loader_file]
    return {
        "dataset": dataset,
        "loader_sha256": _files_sha256(files),
        "partition_code_sha256": _files_sha256([ROOT / f for f in PARTITION_CODE]),
    }


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


def _files_sha256(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(_code(path).encode())
    return digest.hexdigest()[:16]


def forget_sources() -> None:
    """Read source files again, as a new process would (the caches of `_code` and of the
    framework's hash)."""
    _code.cache_clear()
    _framework_sha256.cache_clear()


@functools.lru_cache(maxsize=512)
def _code(path: Path) -> str:
    """The code of a Python file without comments, docstrings and layout (its syntax tree);
    any other file as it is.

    Read once per process: a process runs the code it loaded, so a file edited while it
    runs (a sweep of hours) must not rename its later cells -- they would file results of
    the old code under the new code's name, and its table would miss the earlier cells.
    The next process reads the edit and names new cells."""
    text = path.read_text(errors="replace")
    if path.suffix != ".py":
        return text
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
    target = f"_to-{config.target}" if config.target else ""
    return (
        f"{config.method}_{datasets}{target}_{config.protocol}_{config.shots}shot_seed{config.seed}_{cell_hash(config)}"
    )


def save_yaml(config: RunConfig, path: Path) -> None:
    """The resolved config (every method hyperparameter) and, under `identity:`, the rest of
    the cell's identity; `fedbench run --config` accepts the file back as it is."""
    identity = cell_identity(config)
    data = {**resolved_config(config).to_dict(), IDENTITY_KEY: {k: v for k, v in identity.items() if k != "run"}}
    data[IDENTITY_KEY]["hash"] = identity_hash(identity)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
