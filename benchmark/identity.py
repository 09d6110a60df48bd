"""A cell's identity: everything that determines its numbers, hashed into its run name.

A finished run folder is reused by `fedbench reproduce` only when its identity is the
one asked for now, so a result can never be stale without the folder name saying so:
  run       the RunConfig fields that change results, with the method's hyperparameters
            *resolved* (every default written out, so a changed default is a new cell);
  method    the class, the sha256 of the source files it is defined in (the class and its
            bases up to FederatedMethod) and, for a plugin, its package and version;
  weights   the backbone and the identity of its weights (the toy CLIP's recipe hash, a
            checkpoint file's sha256, an open_clip tag);
  data      the dataset's loader code (and the generator for a generated dataset) and the
            partition / few-shot sampling code.
Settings that cannot change a number (paths, device, W&B, evaluation batch size) are
left out: see `RunConfig.NON_RESULT_FIELDS`.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmark.config import RunConfig

ROOT = Path(__file__).resolve().parent.parent
# The code that turns a dataset into client shards; a change there changes every partition.
PARTITION_CODE = ("data/partition.py", "data/fewshot.py")


def cell_identity(config: "RunConfig") -> dict[str, Any]:
    from benchmark.registry import MethodError

    try:
        method_args, method = resolved_method_args(config.method, config.method_args), method_version(config.method)
    except MethodError as exc:
        # A cell that cannot run (e.g. a preset naming a method not installed here) still has
        # a name, so a dry run can list it; `validate_run` refuses to run it.
        method_args, method = dict(config.method_args), {"unavailable": str(exc).splitlines()[0]}
    return {
        "run": {**config.result_key(), "method_args": method_args},
        "method": method,
        "weights": weights_identity(config.backbone, config.pretrained),
        "data": [data_identity(name) for name in config.datasets + config.test_datasets],
    }


def identity_hash(identity: dict[str, Any]) -> str:
    payload = json.dumps(identity, sort_keys=True, default=str).encode()
    return hashlib.sha256(payload).hexdigest()[:10]


def resolved_method_args(method: str, method_args: dict[str, Any]) -> dict[str, Any]:
    """Every hyperparameter of `method`: its defaults, overridden by `method_args` (validated)."""
    from benchmark.registry import check_method_args, get_method, hyperparameters

    defaults = {h.name: _plain(h.default) for h in hyperparameters(get_method(method))}
    return {**defaults, **{k: _plain(v) for k, v in check_method_args(method, method_args).items()}}


def method_version(name: str) -> dict[str, Any]:
    from benchmark.method import FederatedMethod
    from benchmark.registry import get_method, method_package

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
    from benchmark.backbone import PRETRAINED_IDENTITIES

    _register_suite_weights()
    if pretrained in ("", "none", None):
        return f"{backbone}@random(seed 0)"
    if pretrained in PRETRAINED_IDENTITIES:
        return f"{backbone}@{pretrained}:{PRETRAINED_IDENTITIES[pretrained]()}"
    path = Path(pretrained).expanduser()
    if path.is_file():
        stat = path.stat()
        return f"{backbone}@file sha256:{_file_sha256(str(path.resolve()), stat.st_size, stat.st_mtime_ns)}"
    return f"{backbone}@{pretrained}"  # an open_clip tag names fixed published weights


def data_identity(dataset: str) -> dict[str, Any]:
    from data.catalog import dataset_info

    info = dataset_info(dataset)
    loader_file = Path(inspect.getsourcefile(info.loader))
    # A generated dataset is its generator's code: hash the whole package it lives in.
    files = sorted(loader_file.parent.glob("*.py")) if info.generated else [loader_file]
    return {
        "dataset": dataset,
        "loader_sha256": _files_sha256(files),
        "partition_code_sha256": _files_sha256([ROOT / f for f in PARTITION_CODE]),
    }


def _register_suite_weights() -> None:
    import data.toy  # noqa: F401  (registers the toy CLIP's weights and their identity)


def _source_of(klass: type) -> str:
    try:
        return _read(Path(inspect.getsourcefile(klass))).decode()
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
        digest.update(_read(path))
    return digest.hexdigest()[:16]


def _read(path: Path) -> bytes:
    # A sweep names hundreds of cells; read each source file once per version of it.
    stat = path.stat()
    return _read_cached(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _read_cached(path: str, mtime_ns: int, size: int) -> bytes:
    return Path(path).read_bytes()


def _plain(value: Any) -> Any:
    """YAML/JSON-safe: tuples become lists."""
    return list(value) if isinstance(value, tuple) else value
