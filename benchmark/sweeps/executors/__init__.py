"""Where the missing cells of a sweep run: the `Executor` protocol and the registry of
executors (`fedbench reproduce --executor NAME`).

An executor is one module of this package: a class decorated `@register_executor("name")`
that declares its own command-line flags (`add_arguments`), builds itself from them
(`from_args`) and runs a list of `CellJob`s (`run`). The modules here are found and
imported when this package is (`base`, their contract and registry, and `cells` aside: the cell shipped to a worker, which every
executor runs and which loads torch), so adding an executor is adding one file; the flags
and the `--executor` choices and help of `fedbench reproduce` come from this registry.
`fedbench --help` builds that parser, so an executor module loads no torch and no engine
(Ray, submitit) at import: it imports `cells` and its engine where it runs the cells.

Whichever executor runs it, the unit of work is the cell (`cells.run_cell`): its lock, its
run folder, its recorded failure, exactly as a local sweep's.
"""

from __future__ import annotations

import importlib
import pkgutil

from benchmark.sweeps.executors.base import (  # noqa: F401  (the names the commands and executors use)
    DEFAULT,
    EXECUTORS,
    FLAGS,
    Executor,
    add_executor_arguments,
    executor_from_args,
    executor_help,
    extras_note,
    get_executor,
    import_extra,
    natural_int,
    positive_float,
    positive_int,
    register_executor,
)

SHARED = ("base", "cells")  # modules of this package that are not executors


def _discover() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name not in SHARED:
            importlib.import_module(f"{__name__}.{info.name}")


_discover()
