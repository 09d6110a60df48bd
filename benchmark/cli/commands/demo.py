"""`fedbench demo` (what `make demo` runs): every method on the toy world, one table."""

from __future__ import annotations

import os

from benchmark.cli.commands.reproduce import positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run every registered method on the toy world and print the table",
        description="Builds (first time, cached after) the toy world and its small CLIP, then runs "
        "`fedbench reproduce toy --workers W --cpus-per-cell 1` with every registered method: W cells at a "
        "time, each computing with one torch thread, so that the demo's numbers are the same on every "
        "machine and for every W. Tables go to results/toy/.",
    )
    p.add_argument("--wandb", choices=["auto", "online", "offline", "disabled"], default="auto")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=usable_cores(),
        metavar="W",
        help="cells run at a time (default: this machine's usable cores, %(default)s here)",
    )
    p.set_defaults(func=run)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (a container's or taskset's share)
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def run(args) -> int:
    from benchmark.cli.commands import reproduce

    return reproduce.run(reproduce_args(args.wandb, args.workers))


def reproduce_args(wandb: str, workers: int = 1):
    """`fedbench reproduce toy --methods <every registered method> --workers W --cpus-per-cell 1`
    parsed by reproduce's own parser, so every option reproduce reads has its default."""
    import argparse

    from benchmark.cli.commands import reproduce
    from benchmark.registry import available_methods

    parser = argparse.ArgumentParser(prog="fedbench")
    reproduce.add_parser(parser.add_subparsers())
    methods = [m for m in available_methods() if not m.startswith("test_")]
    return parser.parse_args(
        ["reproduce", "toy", "--methods", *methods, "--wandb", wandb, "--workers", str(workers), "--cpus-per-cell", "1"]
    )
