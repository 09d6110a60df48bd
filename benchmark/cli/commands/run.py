"""`fedbench run`: one method on one dataset; prints the final table, writes a run folder."""

from __future__ import annotations

from pathlib import Path


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_run_arguments

    p = subparsers.add_parser(
        "run",
        help="run one federated experiment",
        description="Run one method on one dataset under one protocol. Method hyperparameters are flags "
        "too (`--method M --method-help` lists them). Precedence: defaults < --config YAML < flags.",
    )
    add_run_arguments(p)
    p.set_defaults(func=run, takes_method_flags=True)


def run(args) -> int:
    from benchmark.cli.args import config_from_args

    config = config_from_args(args)
    if answer_without_running(args, config):
        return 0
    return run_config(config, tags=("fedbench run",))


def answer_without_running(args, config) -> bool:
    """`--method-help` and `--print-config` print their answer and run nothing."""
    from benchmark.cli.args import method_parser
    from benchmark.runs.identity import resolved_config

    if args.method_help:
        method_parser(config.method).print_help()
        return True
    if args.print_config:
        import yaml

        print(yaml.safe_dump(resolved_config(config).to_dict(), sort_keys=False), end="")
        return True
    return False


def run_config(config, tags: tuple[str, ...], engine=None) -> int:
    """Run one cell in its run folder under its lock, tracked, and print its table.
    `engine`: None for the in-process simulator, or another one (`benchmark.runs.flower`)."""
    from benchmark.runs.identity import prepare_weights, run_name
    from benchmark.runs.locks import cell_lock
    from benchmark.runs.prechecks import validate_run
    from benchmark.runs.reporting import format_summary
    from benchmark.runs.results import check_output_location
    from benchmark.runs.runner import run_experiment
    from benchmark.runs.tracking import Tracker

    for note in validate_run(config):  # before W&B starts or a backbone is built
        print(f"note: {note}")
    check_output_location(Path(config.out))
    prepare_weights(config.pretrained)  # the run's name (lock, W&B) hashes the weights it loads
    with cell_lock(Path(config.out) / run_name(config)), Tracker.for_run(config, tags=tags) as tracker:
        result = run_experiment(config, tracker=tracker, engine=engine)
    print(format_summary(result.summary, result.timing))
    print(f"run folder: {result.run_dir}")
    return 0
