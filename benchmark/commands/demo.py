"""`fedbench demo` (what `make demo` runs): every method on the toy world, one table."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run every registered method on the toy world and print the table",
        description="Builds (first time, cached after) the toy world and its small CLIP, then runs "
        "`fedbench reproduce toy` with every registered method. Tables go to results/toy/.",
    )
    p.add_argument("--wandb", choices=["auto", "online", "offline", "disabled"], default="auto")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchmark.commands import reproduce

    return reproduce.run(reproduce_args(args.wandb))


def reproduce_args(wandb: str):
    """`fedbench reproduce toy --methods <every registered method>` parsed by reproduce's own
    parser, so every option reproduce reads has its default."""
    import argparse

    from benchmark.commands import reproduce
    from benchmark.registry import available_methods

    parser = argparse.ArgumentParser(prog="fedbench")
    reproduce.add_parser(parser.add_subparsers())
    methods = [m for m in available_methods() if not m.startswith("test_")]
    return parser.parse_args(["reproduce", "toy", "--methods", *methods, "--wandb", wandb])
