"""`fedbench partition DATASET --protocol P [options] --plot OUT.png`: a protocol's
partition of a dataset, without a model: the clients x classes training-image counts."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_protocol_option_flags

    p = subparsers.add_parser(
        "partition",
        help="show how a protocol splits a dataset over clients (clients x classes counts, --plot a figure)",
        description="Partition DATASET as a run would (same seed, same partition: partition.json's hash), "
        "print the clients x classes training-image counts, and with --plot draw them. No model is built.",
    )
    p.add_argument("dataset", help="dataset name (`fedbench datasets`); several joined by '+'")
    p.add_argument("--protocol", default=argparse_default("protocol"), help="the protocol (`fedbench run --help`)")
    p.add_argument("--clients", type=int, default=argparse_default("clients"), help="number of clients")
    p.add_argument("--shots", type=int, default=argparse_default("shots"), help="training images per class (0 = all)")
    p.add_argument("--seed", type=int, default=argparse_default("seed"), help="the partition's seed (the run seed)")
    p.add_argument("--data-root", default="", help="dataset root ('' = $FEDBENCH_DATA or ~/.cache/fedbench/data)")
    p.add_argument("--plot", metavar="OUT.png", help="draw the clients x classes counts into this image")
    p.add_argument("--csv", metavar="OUT.csv", help="write the counts as CSV (one row per client)")
    add_protocol_option_flags(p)
    p.set_defaults(func=run)


def argparse_default(name: str):
    from benchmark.config import RunConfig

    return RunConfig.__dataclass_fields__[name].default


def run(args) -> int:
    from benchmark.cli.args import protocol_options_given
    from benchmark.cli.outputs import check_output_file, figure_formats, make_parent
    from benchmark.config import build_config
    from benchmark.protocol_registry import get_protocol
    from benchmark.runs.partition_files import partition_table, plot_partition, write_partition_csv
    from data.catalog import resolve_data_root
    from data.combined import load_datasets
    from data.loaders.domainbed import splits_in_memory
    from data.transforms import clip_transforms

    config = build_config(
        {
            "dataset": args.dataset,
            "protocol": args.protocol,
            "clients": args.clients,
            "shots": args.shots,
            "seed": args.seed,
            "data_root": args.data_root,
        },
        protocol_options_given(args),
    )
    # The output paths before the data loads: a wrong name or format is exit 2, not a traceback.
    plot = check_output_file(args.plot, "--plot", figure_formats()) if args.plot else None
    csv_file = check_output_file(args.csv, "--csv", ["csv"]) if args.csv else None
    protocol = get_protocol(config.protocol)
    protocol.check(config)
    with splits_in_memory():  # a look at the partition writes nothing into the data root
        dataset = load_datasets(
            config.datasets,
            resolve_data_root(config.data_root),
            clip_transforms(224, augment=False),
            config.test_datasets,
        )
    partition = protocol.partition(dataset, config)
    table = partition_table(partition, dataset.train.labels, dataset.class_names)
    options_text = ", ".join(f"{k}={v}" for k, v in config.protocol_args.items())
    print(
        f"{config.protocol} on {config.dataset} ({options_text or 'no options'}; seed {config.seed}): "
        f"{len(partition.clients)} clients, partition hash {partition.hash}"
    )
    print("client  images  classes held")
    for client, row in zip(partition.clients, table["counts"]):
        held = sum(1 for count in row if count)
        print(f"{client.client_id:>6}  {sum(row):>6}  {held:>12}")
    if csv_file:
        write_partition_csv(table, make_parent(csv_file))
        print(f"wrote {csv_file}")
    if plot:
        plot_partition(table, make_parent(plot), f"{config.protocol} on {config.dataset}, seed {config.seed}")
        print(f"wrote {plot}")
    return 0
