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
    import argparse

    from benchmark.commands import reproduce
    from benchmark.registry import available_methods

    methods = [m for m in available_methods() if not m.startswith("test_")]
    return reproduce.run(
        argparse.Namespace(
            table="toy", seeds=None, datasets=None, methods=methods, dry_run=False, force=False, out=None, results=None,
            data_root=None, device=None, wandb=args.wandb, set=[], tuned=False,
        )
    )
