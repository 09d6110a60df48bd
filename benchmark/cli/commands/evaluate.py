"""`fedbench evaluate RUN_DIR`: score a finished run's saved clients again, or on another
dataset or protocol, without training, into a new run folder whose identity names the
source run (its clients.pt: benchmark/runs/clients_file.py)."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_protocol_option_flags, add_quiet_argument

    p = subparsers.add_parser(
        "evaluate",
        help="score a finished run's saved clients again (or on another dataset / protocol), without training",
        description="Score the clients a finished `fedbench run` saved (RUN_DIR/clients.pt: the states its final "
        "metrics scored) with the run's settings, or on another --dataset or --protocol, without training. "
        "Writes a new run folder (NAME_evaluated_...) under --out (default: evaluated/ beside RUN_DIR) whose "
        "identity names the source run; on the "
        "run's own dataset and protocol its metrics are the run's final metrics.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished run folder (it holds summary.json and clients.pt)")
    p.add_argument("--dataset", default=None, help="score on this dataset instead of the run's (the same clients)")
    p.add_argument("--protocol", default=None, help="score under this protocol instead of the run's")
    p.add_argument("--data-root", default=None, help="the dataset root, when not the run's")
    p.add_argument(
        "--out", default=None, help="folder receiving the new run folder (default: evaluated/ in RUN_DIR's folder)"
    )
    p.add_argument("--wandb", default="disabled", help="W&B mode of the evaluation run (default: disabled)")
    p.add_argument("--force", action="store_true", help="score again although the evaluation's run folder exists")
    # A protocol's own options (--beta ...): with --protocol, they replace its defaults; without
    # it, they replace the source run's values of its protocol's options.
    add_protocol_option_flags(p)
    add_quiet_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import json
    from pathlib import Path

    from benchmark.cli.args import protocol_options_given
    from benchmark.cli.single_run import run_config
    from benchmark.config import ConfigError, build_config, load_yaml
    from benchmark.runs.clients_file import CLIENTS_FILE, check_clients_file

    source = Path(args.run_dir)
    if not (source / "summary.json").is_file() or not (source / "config.yaml").is_file():
        raise ConfigError(
            f"{source} is not a finished run folder (no summary.json and config.yaml); pass a folder `fedbench run` "
            "wrote, e.g. runs/promptfl_toy_base2novel_16shot_seed1_<hash> (`fedbench runs` lists them)"
        )
    summary = json.loads((source / "summary.json").read_text())
    if summary.get("trainable_params", 1) and not (source / CLIENTS_FILE).is_file():
        # Refused here, before a model is built or a folder written (a refusal leaves --out as it was).
        raise ConfigError(
            f"{source} holds no {CLIENTS_FILE}, the clients' states its final metrics scored, so there is nothing "
            "to evaluate: pass a run folder that `fedbench run` wrote and still holds it (a run on Flower keeps "
            "its clients' states on its clients), or run the cell again with `fedbench run`"
        )
    if (source / CLIENTS_FILE).is_file():
        check_clients_file(source / CLIENTS_FILE)  # a truncated one: a clear error, not torch's traceback
    settings = load_yaml(source / "config.yaml")
    changes = {
        "dataset": args.dataset,
        "protocol": args.protocol,
        "data_root": args.data_root,
        # Beside the source's folder, not in it: `fedbench runs DIR` lists DIR's runs, and a re-scored
        # run there read as one more row and one more baseline of the same federation.
        "out": args.out if args.out is not None else str(source.resolve().parent / "evaluated"),
        "wandb": args.wandb,
    }
    if args.protocol is not None and args.protocol != settings.get("protocol"):
        # Another protocol takes its own options (its defaults), not the source run's.
        settings.pop("protocol_args", None)
    settings.update({k: v for k, v in changes.items() if v is not None})
    given = protocol_options_given(args)
    if given:
        settings["protocol_args"] = {**settings.get("protocol_args", {}), **given}
    # The scored states are the saved ones: nothing trains again, nothing is fine-tuned again.
    settings.update(evaluate_from=str(source.resolve()), finetune_epochs=0)
    return run_config(build_config(settings), tags=("fedbench evaluate",), force=args.force)
