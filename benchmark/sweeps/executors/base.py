"""The executors' contract and registry: the `Executor` protocol, `@register_executor`, the
lookups and the flags they add (the package's `__init__` imports every executor module, which
imports this one: so the discovery closes no import cycle)."""

from __future__ import annotations

import argparse
import importlib
from typing import TYPE_CHECKING, Callable, ClassVar, Iterator, Protocol

from benchmark.config import ConfigError

if TYPE_CHECKING:
    from benchmark.sweeps.executors.cells import CellJob, Outcome

DEFAULT = "local"


class Executor(Protocol):
    """Runs the jobs of a sweep and yields each job's outcome as it comes (in any order);
    calls `started(job)` when a job starts here (the progress bar), if it knows."""

    name: ClassVar[str]  # set by register_executor
    summary: ClassVar[str]  # its part of `--executor`'s help
    extra: ClassVar[str | None]  # the module its pip extra installs ('fedbench[NAME]'), None: none needed
    waits: bool  # False: `run` submits the jobs and returns (the next sweep renders the table)

    @classmethod
    def add_arguments(cls, group: argparse._ArgumentGroup) -> None:
        """Add this executor's flags to `fedbench reproduce`; each defaults to None (not given)."""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Executor":
        """The executor the parsed flags ask for (its own and the common `--cpus-per-cell`)."""

    def run(self, jobs: list["CellJob"], started: Callable[["CellJob"], None]) -> Iterator[tuple["CellJob", "Outcome"]]:
        """Run every job; yield (job, outcome) as each ends."""


EXECUTORS: dict[str, type[Executor]] = {}
FLAGS: dict[str, tuple[tuple[str, str], ...]] = {}  # executor -> (option, dest) of each flag it added


def register_executor(name: str) -> Callable[[type], type]:
    def decorate(cls: type) -> type:
        if name in EXECUTORS and EXECUTORS[name] is not cls:
            raise ValueError(f"executor {name!r} is registered twice ({EXECUTORS[name].__module__}, {cls.__module__})")
        cls.name = name
        EXECUTORS[name] = cls
        return cls

    return decorate


def get_executor(name: str) -> type[Executor]:
    if name not in EXECUTORS:
        raise ConfigError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")
    return EXECUTORS[name]


def import_extra(executor: str):
    """The engine module of `executor` (its `extra`), or a ConfigError (CLI exit 2) naming
    the pip extra that installs it."""
    module = get_executor(executor).extra
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"--executor {executor} needs the {module} package, which is not installed ({exc}); "
            f"install the extra: pip install 'fedbench[{executor}]' "
            f"(in a clone: pip install -c constraints.txt -e '.[{executor}]')"
        ) from None


def executor_help() -> str:
    """`--executor`'s help: each executor's summary, the default said."""
    return "; ".join(
        f"{name}: {cls.summary}{' (default)' if name == DEFAULT else ''}" for name, cls in EXECUTORS.items()
    )


def extras_note() -> str:
    """Which executors need a pip extra, and the command that installs it."""
    named = [name for name, cls in EXECUTORS.items() if cls.extra]
    if not named:
        return ""
    titles = " and ".join(n.capitalize() for n in named)
    return (
        f"{titles} {'are extras' if len(named) > 1 else 'is an extra'}: pip install "
        + " / ".join(f"'fedbench[{n}]'" for n in named)
        + "."
    )


class _Recorder:
    """An argument group that remembers the options an executor added (its own flags)."""

    def __init__(self, group) -> None:
        self.group, self.options = group, []

    def add_argument(self, *args, **kwargs):
        action = self.group.add_argument(*args, **kwargs)
        self.options.append((action.option_strings[0], action.dest))
        return action


def add_executor_arguments(group) -> None:
    """Every registered executor's flags, in registry order."""
    for name, cls in EXECUTORS.items():
        recorder = _Recorder(group)
        cls.add_arguments(recorder)
        FLAGS[name] = tuple(recorder.options)


def executor_from_args(args: argparse.Namespace, check_extra: bool = True) -> Executor:
    """The executor `args.executor` names, built from its flags; the flags of another
    executor are an error (exit 2), and so is a missing extra (`check_extra`: said before
    anything is planned)."""
    for owner, options in FLAGS.items():
        given = [option for option, dest in options if getattr(args, dest, None) is not None]
        if given and owner != args.executor:
            raise ConfigError(
                f"{', '.join(given)} only apply to --executor {owner} (this is --executor {args.executor})"
            )
    cls = get_executor(args.executor)
    if check_extra and cls.extra:
        import_extra(args.executor)
    return cls.from_args(args)


def positive_int(text: str) -> int:
    """An argparse type (the executors' flags, and the commands' through benchmark.cli.args)."""
    return _number(text, int, 1)


def natural_int(text: str) -> int:
    return _number(text, int, 0)


def positive_float(text: str) -> float:
    value = _number(text, float, 0)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _number(text: str, kind: type, least: int):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or value < least or value != value:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'} >= {least}, got {text!r}"
        )
    return value
