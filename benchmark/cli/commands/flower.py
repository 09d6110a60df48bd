"""`fedbench flower`: one experiment as a Flower app on Flower's simulation runtime."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_run_arguments

    p = subparsers.add_parser(
        "flower",
        help="run one federated experiment on Flower's simulation runtime (the [flower] extra)",
        description="Run one experiment like `fedbench run` (the same flags, the same numbers and run folder; "
        "not --batched-evaluation: a node holds one client), "
        "with the method as a Flower app: one virtual SuperNode per client on Flower's simulation runtime "
        "(a local Ray instance). Each node keeps its client's state and sends only the method's upload_keys; "
        "the server applies the method's aggregate and download. Round checkpoints are not written. "
        "For a real federation of SuperNodes use `flwr run` (docs/scaling-out.md). Needs the extra: "
        "pip install -c constraints.txt -e '.[flower]' in the checkout.",
    )
    add_run_arguments(p)
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="ClientApps that train at once, each in its own Ray worker process (default: 1)",
    )
    p.add_argument(
        "--client-cpus", type=int, default=1, metavar="N", help="CPUs Ray reserves per ClientApp (default: 1)"
    )
    p.add_argument(
        "--client-gpus",
        type=float,
        default=0.0,
        metavar="F",
        help="GPUs (a fraction shares one) Ray reserves per ClientApp; set it with --device cuda (default: 0)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="run the cell again although its finished run folder exists under --out (else it is skipped)",
    )
    p.set_defaults(func=run, takes_method_flags=True)


def run(args) -> int:
    from benchmark.cli.args import answer_without_running, config_from_args
    from benchmark.cli.single_run import run_config
    from benchmark.config import ConfigError

    config = config_from_args(args)
    if config.finetune_epochs or config.evaluate_from:
        # Said here, before the data, the weights and Flower load (8 s): FlowerEngine.check says the same.
        raise ConfigError(
            "--finetune-epochs and evaluating a saved run run in process only "
            "(the clients' states stay on Flower's clients): use `fedbench run` / `fedbench evaluate`"
        )
    if config.batched_evaluation:  # set by the flag or --config
        raise ConfigError(
            "--batched-evaluation true: a Flower node holds one client, so its evaluation cannot be batched "
            "across clients; drop the flag"
        )
    if config.batched_training:
        raise ConfigError(
            "--batched-training true: a Flower node holds one client, so its training cannot be batched "
            "across clients; drop the flag"
        )
    if answer_without_running(args, config):
        return 0
    if args.parallel < 1 or args.client_cpus < 1 or args.client_gpus < 0:
        raise ConfigError(
            f"--parallel {args.parallel}, --client-cpus {args.client_cpus}, --client-gpus {args.client_gpus}: "
            "expected --parallel >= 1, --client-cpus >= 1 and --client-gpus >= 0"
        )
    from benchmark.runs.flower import simulate  # the [flower] extra: a clear error when missing

    return run_config(
        config,
        tags=("fedbench flower",),
        engine=simulate(args.parallel, args.client_cpus, args.client_gpus),
        force=args.force,
    )
