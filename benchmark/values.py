"""One strict rule for turning a YAML value or a flag's text into an option's type, shared by
the run options (`benchmark.config`) and the protocols' options (`benchmark.protocol`); and
the one reading of a dataset list ('a+b').

Stricter than Python's constructors: YAML `rounds: true` is no integer, `rounds: null` no
number, `rounds: 2.5` no integer, `lr: nan` no finite number, and "false" is not truthy.
"""

from __future__ import annotations

import math
from typing import Any


def parse_bool(value: Any) -> bool:
    # "false" must not be truthy (a classic research-code bug with string flags).
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"not a boolean: {value!r}")


def coerce(kind: type, value: Any) -> Any:
    """`value` as a `kind` (bool, int, float or str); ValueError or TypeError when it is not one."""
    if kind is bool:
        return parse_bool(value)
    if value is None or isinstance(value, bool):
        raise ValueError(value)
    if kind is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    converted = kind(value)
    if kind is float and not math.isfinite(converted):
        raise ValueError(value)
    return converted


def dataset_list(value: str) -> list[str]:
    """'a+b+c' -> ['a', 'b', 'c']; '' -> [] (a run's `dataset`, a protocol's dataset options)."""
    return [part.strip() for part in value.split("+")] if value.strip() else []
