"""What a method's hyperparameters are and which values they take, without torch.

`fedbench run --method M --lr -1` must fail in a second, before lightning and torch load
(several seconds). The classes say what the hyperparameters are (`benchmark.registry`
reads their `__init__` signatures, docstrings and `ranges`); for the built-in methods that
reading is also kept in `methods/hyperparameters.json`, which the command line uses while
the files it was written from are unchanged (the sha256 of each is stored in it; a method
file added since is read from its class and leaves the others fast).
`python scripts/write_method_manifest.py` writes it; a test fails when it is out of date.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmark.config import parse_bool
from benchmark.errors import SetupWarning, UserError

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "methods" / "hyperparameters.json"
# What the built-in methods' hyperparameters are read from: their modules in methods/ (the
# signatures, docstrings and `ranges`) and this module (Range, OPTIMIZER_RANGES). Not
# FederatedMethod's module: its `__init__` takes only the backbone, and editing its
# docstrings must not make the file stale.
SOURCES = (ROOT / "methods", Path(__file__).resolve())
TYPES = {t.__name__: t for t in (int, float, str, bool)}


class MethodError(UserError, ValueError):
    """An unknown method, a bad hyperparameter or a broken plugin; the message says what to do."""


@dataclass(frozen=True)
class Range:
    """The values a numeric hyperparameter may take (`FederatedMethod.ranges`), checked with
    the other hyperparameters before anything is built: `Range(gt=0)` for a learning rate,
    `Range(ge=0, lt=1)` for a momentum, `Range(ge=1)` for a width. Bounds left None are open."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def contains(self, value: Any) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        return not (
            (self.gt is not None and not value > self.gt)
            or (self.ge is not None and not value >= self.ge)
            or (self.lt is not None and not value < self.lt)
            or (self.le is not None and not value <= self.le)
        )

    def covers(self, space: Any) -> bool:
        """Whether every value a tuning search space can suggest lies in this range."""
        if hasattr(space, "values"):  # a Choice
            return all(self.contains(v) for v in space.values)
        return self.contains(space.low) and self.contains(space.high)

    def check(self) -> str | None:
        if (self.gt is not None and self.ge is not None) or (self.lt is not None and self.le is not None):
            return "takes one lower bound (gt or ge) and one upper bound (lt or le)"
        lows = [b for b in (self.gt, self.ge) if b is not None]
        highs = [b for b in (self.lt, self.le) if b is not None]
        if not lows and not highs:
            return "needs a bound"
        if lows and highs and not lows[0] < highs[0]:
            return f"needs its lower bound below its upper bound, got {self}"
        return None

    def __str__(self) -> str:
        low = f"> {self.gt:g}" if self.gt is not None else f">= {self.ge:g}" if self.ge is not None else ""
        high = f"< {self.lt:g}" if self.lt is not None else f"<= {self.le:g}" if self.le is not None else ""
        return " and ".join(part for part in (low, high) if part)


# The ranges of the usual SGD / AdamW hyperparameters, for a method's `ranges`.
OPTIMIZER_RANGES: dict[str, Range] = {
    "lr": Range(gt=0),
    "momentum": Range(ge=0, lt=1),
    "weight_decay": Range(ge=0),
}


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    type: type
    default: Any
    help: str = ""  # from the "Args:" section of the method's __init__ (or class) docstring
    choices: tuple = ()  # from a typing.Literal annotation
    # Words taken besides values of `type`, from `int | Literal["auto"]`: resolved by the
    # method's `fit_to_backbone` before anything is built.
    keywords: tuple[str, ...] = ()
    range: Range | None = None  # from the method's `ranges`

    @property
    def type_name(self) -> str:
        return " | ".join([self.type.__name__, *map(repr, self.keywords)])

    def describe(self) -> str:
        """'TYPE, one of a|b, default X: help' -- the one description --method-help and --describe show."""
        kind = self.type_name + (f", one of {' | '.join(map(str, self.choices))}" if self.choices else "")
        bounds = f", {self.range}" if self.range is not None else ""
        return f"{kind}{bounds}; default {self.default!r}" + (f". {self.help}" if self.help else "")

    def parse(self, text: str) -> Any:
        """A command-line value: one of `keywords` as it is, else converted to `type`."""
        if text in self.keywords:
            return text
        return parse_bool(text) if self.type is bool else self.type(text)


def convert_value(h: Hyperparameter, value: Any, method: str) -> Any:
    if isinstance(value, str) and value in h.keywords:
        return value
    converted = _convert(h, value, method)
    if isinstance(converted, float) and not math.isfinite(converted):
        # `--lr nan` would train a diverged model whose metrics sit at chance.
        raise MethodError(
            f"method {method!r}: hyperparameter {h.name!r} must be a finite number, got {value!r} "
            f"(default {h.default!r})"
        )
    if h.choices and converted not in h.choices:
        raise MethodError(
            f"method {method!r}: hyperparameter {h.name!r} must be one of {', '.join(map(repr, h.choices))}, "
            f"got {value!r} (default {h.default!r}); pass --{h.name.replace('_', '-')} with one of them"
        )
    if h.range is not None and converted is not None and not h.range.contains(converted):
        raise MethodError(
            f"method {method!r}: hyperparameter {h.name!r} must be {h.range}, got {value!r} (default {h.default!r}); "
            f"pass --{h.name.replace('_', '-')} with a value {h.range}"
        )
    return converted


def _convert(h: Hyperparameter, value: Any, method: str) -> Any:
    if (value is None and h.default is not None) or (h.type is not bool and isinstance(value, bool)):
        # YAML `lr: true` is not a number, although Python's bool is an int; `lr: null` is no lr.
        raise MethodError(
            f"method {method!r}: hyperparameter {h.name!r} expects {h.type.__name__}, got {value!r} "
            f"(default {h.default!r})"
        )
    if value is None or isinstance(value, h.type):
        return value
    try:
        if h.type is bool:
            return parse_bool(value)
        if h.type in (int, float, str):
            if h.type is int and isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return h.type(value)
    except (TypeError, ValueError):
        pass
    raise MethodError(
        f"method {method!r}: hyperparameter {h.name!r} expects {h.type_name}, got {value!r} (default {h.default!r})"
    )


def is_method_file(spec: str) -> bool:
    """`path/to/file.py` or `path/to/file.py:Class`: a method loaded from a file, unpackaged."""
    return isinstance(spec, str) and (spec.endswith(".py") or ".py:" in spec)


def source_files() -> list[Path]:
    """The files the built-in methods' hyperparameters are read from (SOURCES), sorted."""
    return sorted(p for s in SOURCES for p in ([s] if s.is_file() else s.rglob("*.py")))


def source_digests(files: list[Path] | None = None) -> dict[str, str]:
    """sha256 of each file in `files` (default: `source_files()`), by its path in the checkout."""
    return {
        path.relative_to(ROOT).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in (source_files() if files is None else files)
    }


def changed_sources(recorded: dict[str, str]) -> list[str]:
    """The files of a manifest's `sources` whose content is not what it was written from
    (deleted ones included). A file added since is not among them: it cannot change what the
    recorded files declare, and its own methods are not in the manifest (they are read from
    their classes), so a new method file leaves the manifest good for every other method."""
    changed = []
    for name, digest in recorded.items():
        path = ROOT / name
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            changed.append(name)
    return changed


def to_record(h: Hyperparameter) -> dict[str, Any]:
    record = asdict(h)
    record["type"] = h.type.__name__
    record["range"] = None if h.range is None else {k: v for k, v in asdict(h.range).items() if v is not None}
    return record


def from_record(record: dict[str, Any]) -> Hyperparameter:
    bounds = record["range"]
    return Hyperparameter(
        record["name"],
        TYPES[record["type"]],
        record["default"],
        record["help"],
        tuple(record["choices"]),
        tuple(record["keywords"]),
        None if bounds is None else Range(**bounds),
    )


def builtin_hyperparameters(method: str) -> list[Hyperparameter] | None:
    """Method `method`'s hyperparameters from the manifest; None when it is not a method the
    manifest holds (a plugin, a method file added to methods/ since) or a file the manifest
    was written from has changed (the caller then imports the classes, and a warning says
    how to make the command line fast again)."""
    try:
        manifest = json.loads(MANIFEST.read_text())
    except (OSError, ValueError):
        return None
    if method not in manifest.get("methods", {}):
        return None
    changed = changed_sources(manifest.get("sources") or {"the manifest's format": ""})
    if changed:
        _warn_stale(changed)
        return None
    return [from_record(r) for r in manifest["methods"][method]]


def _warn_stale(changed: list[str]) -> None:
    import warnings

    shown = MANIFEST.relative_to(ROOT).as_posix() if MANIFEST.is_relative_to(ROOT) else MANIFEST
    warnings.warn(
        f"{shown} is out of date ({', '.join(changed)} changed since it was "
        "written), so the command line imports the method classes to check flags (seconds instead of a "
        "fraction of one); `python scripts/write_method_manifest.py` writes it again",
        SetupWarning,
        stacklevel=3,
    )


def manifest_problems(manifest: dict[str, Any], methods: dict[str, list], files: dict[str, str]) -> list[str]:
    """What makes a stored `manifest` disagree with the classes (`methods`: each built-in
    method's records, as `hyperparameter_manifest` reads them; `files`: its module file): a
    recorded file changed or deleted, a method of a recorded file missing or different.
    A method of a file added since is no problem (it is read from its class), so a new method
    file keeps `make test` green; `make test` fails on any of the others."""
    recorded = manifest.get("sources") or {}
    if not recorded:
        return ["it records no source files (an older format)"]
    problems = [f"{name} changed" for name in changed_sources(recorded)]
    for name, records in methods.items():
        if files[name] not in recorded:
            continue  # a file added since the manifest was written
        if name not in manifest.get("methods", {}):
            problems.append(f"method {name} ({files[name]}) is missing")
        elif manifest["methods"][name] != records:
            problems.append(f"method {name}'s hyperparameters differ from its class's")
    problems += [f"method {name} is gone" for name in manifest.get("methods", {}) if name not in methods]
    return problems


def check_values(
    name: str, hyperparameters: list[Hyperparameter], method_args: dict[str, Any] | None
) -> dict[str, Any]:
    """`method_args` validated against method `name`'s `hyperparameters` and type-converted."""
    known = {h.name: h for h in hyperparameters}
    args = dict(method_args or {})
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise MethodError(
            f"method {name!r} has no hyperparameter {', '.join(map(repr, unknown))}. "
            f"Its hyperparameters: {', '.join(known) or 'none'} (see `fedbench methods --describe {name}`)."
        )
    return {k: convert_value(known[k], v, name) for k, v in args.items()}
