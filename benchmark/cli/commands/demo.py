"""`fedbench demo` (what `make demo` runs): every method on the toy world, one table."""

from __future__ import annotations

import os

from benchmark.cli.args import add_quiet_argument, positive_int


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run every registered method on the toy world and print the table",
        description="Builds (first time, cached after) the toy world and its small CLIP, then runs "
        "`fedbench reproduce toy --until-resolved --budget 15m --workers W --cpus-per-cell 1` with every "
        "registered method: the preset's 3 seeds, then more seeds for the gaps of the ranking they leave open, "
        "within 15 minutes at the preset's stated seconds a cell (`cell_seconds` in benchmark/presets/toy.yaml: "
        "75 cells, the same on every machine); W cells "
        "at a time, each computing with one torch thread, so that the demo's numbers are the same on every "
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
    add_quiet_argument(p)
    # The parsers of every command, complete by the time `run` reads them: the demo parses
    # with reproduce's own, so that this module never imports the package that discovers it.
    p.set_defaults(func=run, command_parsers=subparsers.choices)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (a container's or taskset's share)
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


# The commands whose parsers `run` reads: `main` builds only the parser of the command given,
# and these with it.
USES = ("reproduce",)

# The demo's promise: 15 minutes on the 2-core machine it is timed on (results/toy/timings.md),
# turned into cells by the toy preset's cell_seconds, never by a clock read during the run.
DEMO_BUDGET = "15m"


def run(args) -> int:
    reproduce = reproduce_args(args.command_parsers, args.wandb, args.workers, args.quiet)
    return reproduce.func(reproduce)


def reproduce_args(command_parsers: dict, wandb: str, workers: int = 1, quiet: bool = False):
    """`fedbench reproduce toy --methods <every registered method> --until-resolved --budget 15m
    --workers W --cpus-per-cell 1`
    parsed by fedbench's own parser of `reproduce` (no import of the reproduce command), so
    every option reproduce reads has its default; `.func` runs it."""
    from benchmark.registry import available_methods

    methods = [m for m in available_methods() if not m.startswith("test_")]
    reproduce = command_parsers["reproduce"].parse_args(
        ["toy", "--methods", *methods, "--until-resolved", "--budget", DEMO_BUDGET]
        + ["--wandb", wandb, "--workers", str(workers), "--cpus-per-cell", "1"]
        + (["--quiet"] if quiet else [])
    )
    reproduce.command = "reproduce"
    return reproduce
