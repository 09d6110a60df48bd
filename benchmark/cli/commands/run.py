"""`fedbench run`: one method on one dataset; prints the final table, writes a run folder."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_quiet_argument, add_run_arguments

    p = subparsers.add_parser(
        "run",
        help="run one federated experiment",
        description="Run one method on one dataset under one protocol. Method hyperparameters are flags "
        "too (`--method M --method-help` lists them). Precedence: defaults < --config YAML < flags.",
    )
    add_run_arguments(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="run the cell again although its finished run folder exists under --out (without it the run is "
        "skipped and its table printed, as `fedbench reproduce` skips finished cells)",
    )
    add_quiet_argument(p)
    p.set_defaults(func=run, takes_method_flags=True)


def run(args) -> int:
    from benchmark.cli.args import answer_without_running, config_from_args
    from benchmark.cli.single_run import run_config

    config = config_from_args(args)
    if answer_without_running(args, config):
        return 0
    return run_config(config, tags=("fedbench run",), force=args.force)
