"""A run-scoped on/off setting that code deep in a run reads without it being passed down:
the exact shortcuts (`benchmark.shortcuts`) and the compiled blocks (`benchmark.compiled`)
are each one `RunSwitch`, entered for a run by `benchmark.runs.numerics.computing_as`."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Iterator


class RunSwitch:
    """A boolean held in a context variable: `active()` reads it, `with use(enabled):` sets it
    for the code inside (threads and tasks started inside see their own copy)."""

    def __init__(self, name: str, default: bool) -> None:
        self._value: ContextVar[bool] = ContextVar(name, default=default)

    def active(self) -> bool:
        return self._value.get()

    @contextlib.contextmanager
    def use(self, enabled: bool) -> Iterator[None]:
        token = self._value.set(bool(enabled))
        try:
            yield
        finally:
            self._value.reset(token)
