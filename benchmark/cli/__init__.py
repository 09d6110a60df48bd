"""`fedbench`: the command line. Each subcommand is a module in `benchmark/cli/commands/`
with `add_parser(subparsers)`; its parser sets `func(args) -> exit code`."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import signal
import sys
import threading
import warnings

import benchmark.cli.commands
from benchmark.cli.args import flag_suggestions, option_strings

# benchmark.errors (and torch, which it imports) is loaded only when a command ends in an
# error: `fedbench --help` must stay fast.


class Parser(argparse.ArgumentParser):
    """No abbreviated flags: `--round 3` must not quietly mean `--rounds 3` today and
    something else once another flag starting with `--round` exists."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand; with `command`, of that one alone when its module is
    named after it (`new-method`: commands/new_method.py), as `main` builds it: the flags of
    `run`, `reproduce`, `tune`, ... are generated from the run options and the protocols,
    a third of a second that `fedbench presets` need not spend. Any other name (`data`,
    which commands/datasets.py adds; a typo, which argparse answers with every choice) gets
    the whole parser."""
    parser = Parser(
        prog="fedbench",
        description="Benchmark personalized federated fine-tuning of CLIP (pFedMMA and baselines).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    names = sorted(info.name for info in pkgutil.iter_modules(benchmark.cli.commands.__path__))
    module_name = None if command is None or command.startswith("-") else command.replace("-", "_")
    if module_name in names:
        module = importlib.import_module(f"benchmark.cli.commands.{module_name}")
        # a command that runs others (`demo` parses with reproduce's parser) names them in USES
        for name in (*getattr(module, "USES", ()), module_name):
            importlib.import_module(f"benchmark.cli.commands.{name}").add_parser(subparsers)
        if command in subparsers.choices:
            return parser
        return build_parser()
    for name in names:
        importlib.import_module(f"benchmark.cli.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    # Method hyperparameter flags depend on --method, so commands that take them
    # (`run`, `profile`) parse the leftovers themselves.
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    command = _subparser(parser, args.command)
    # A misspelt flag lands among the leftovers: the error names the flags it is close to.
    args.command_flags = option_strings(command)
    if extra and not getattr(args, "takes_method_flags", False):
        command.error(f"unrecognized arguments: {' '.join(extra)}{flag_suggestions(extra, args.command_flags)}")
    args.extra = extra
    delivered: list[int] = []  # the signals that stopped this call (not an interrupt raised by code)
    previous = _stop_on_signals(delivered)
    quiet = _quiet_environment(getattr(args, "quiet", False))
    shown = warnings.showwarning
    warnings.showwarning = _one_line_setup_warnings(shown)
    try:
        return int(args.func(args) or 0)
    except BaseException as exc:
        from benchmark.errors import DivergenceError, RunInterrupted, UserError

        if isinstance(exc, UserError):
            print(f"fedbench {args.command}: error: {exc}", file=sys.stderr)
            return 2
        if isinstance(exc, DivergenceError):
            print(f"fedbench {args.command}: error: {exc}", file=sys.stderr)
            return 1
        if not isinstance(exc, (RunInterrupted, KeyboardInterrupt)):
            raise
        stop = exc if isinstance(exc, RunInterrupted) else RunInterrupted(signal.SIGINT)
        print(
            f"fedbench {args.command}: {stop}; finished runs are kept, unfinished ones wrote no run folder",
            file=sys.stderr,
        )
        for note in stop.notes:  # per unfinished run: its round checkpoint, or none, and where it goes on
            print(f"  {note}", file=sys.stderr)
        if not stop.notes:
            print("  no run had started its rounds (nothing to resume); the same command starts again", file=sys.stderr)
        for signum in delivered[:1]:
            # A host that runs main() in its process and asked to hear of signals (a test
            # session: tests/signal_guard.py) stops too, instead of going on to its next call.
            handler = previous.get(signum)
            if getattr(handler, "fedbench_chain", False):
                handler(signum, None)
        return stop.exit_code
    finally:
        warnings.showwarning = shown
        _restore_environment(quiet)
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def _one_line_setup_warnings(show):
    """Every warning as one line `fedbench: warning: ...`, never Python's two (the second
    quoted the source line that called `warnings.warn`, e.g. compare.py's): a SetupWarning
    (benchmark.errors) is about the user's command, so its message alone; any other says its
    kind and where it was raised, for a bug report. `show` is kept for the caller to restore."""
    from benchmark.errors import SetupWarning

    def one_line(message, category, filename, lineno, file=None, line=None):
        text = " ".join(str(message).split())
        if not issubclass(category, SetupWarning):
            text += f" ({category.__name__} at {_short_path(filename)}:{lineno})"
        print(f"fedbench: warning: {text}", file=file or sys.stderr)

    return one_line


def _short_path(filename: str) -> str:
    """A file of this project by its path in the checkout, another by its last two parts."""
    from pathlib import Path

    path = Path(filename)
    root = Path(__file__).resolve().parents[2]
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    return "/".join(path.parts[-2:])


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of subcommand `name` (argparse keeps them in the subparsers action's choices)."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _quiet_environment(quiet: bool) -> dict[str, str | None]:
    """`--quiet`: no progress output from this process or the workers it starts (they inherit
    the environment), W&B's console lines included. Returns the variables to restore: `main`
    may be called again in the same process (tests, `fedbench demo`)."""
    from benchmark.progress import QUIET_ENV

    if not quiet:
        return {}
    changed = {name: os.environ.get(name) for name in (QUIET_ENV, "WANDB_SILENT")}
    os.environ[QUIET_ENV] = "1"
    os.environ.setdefault("WANDB_SILENT", "true")
    return changed


def _restore_environment(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _stop_on_signals(delivered: list[int]) -> dict[int, object]:
    """SIGTERM (a scheduler's timeout, preemption) and SIGINT (Ctrl-C) raise RunInterrupted,
    which ends the command with 128 + the signal number instead of a success (SIGTERM used
    to exit 0) or Lightning's silent exit 1; each one received is appended to `delivered`.
    Returns the handlers to restore."""

    def stop(signum, frame):
        from benchmark.errors import RunInterrupted

        delivered.append(signum)
        raise RunInterrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.getsignal(signum)
        signal.signal(signum, stop)
    return previous
