"""`fedbench`: the command line. Each subcommand is a module in `benchmark/commands/`
with `add_parser(subparsers)`; its parser sets `func(args) -> exit code`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import benchmark.commands
from benchmark.errors import USER_ERRORS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedbench",
        description="Benchmark personalized federated fine-tuning of CLIP (pFedMMA and baselines).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(benchmark.commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"benchmark.commands.{info.name}")
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # Method hyperparameter flags depend on --method, so commands that take them
    # (`run`, `profile`) parse the leftovers themselves.
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if extra and not getattr(args, "takes_method_flags", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        print(f"fedbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished runs are kept, the unfinished one left no run folder", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
