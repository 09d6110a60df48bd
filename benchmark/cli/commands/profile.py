"""`fedbench profile`: where the time of a client-round goes, model vs framework."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    from benchmark.cli.args import add_run_arguments

    p = subparsers.add_parser(
        "profile",
        help="time per client-round (model vs framework) and FLOPs executed vs the exact minimum",
        description="Runs the configured experiment without writing results and prints, per client-round, "
        "the time in the model (forward, backward, optimizer step), in data loading (fetching, decoding, "
        "augmenting, collating batches), in the method's configure_optimizers (a fresh optimizer per "
        "client-round) and the framework's overhead (seeding, state swaps, the loop around the steps, "
        "upload and aggregation), the run's executed FLOPs, and "
        "the FLOPs of the paper's Table 1 schedule for the method on the run's backbone architecture: "
        "executed against the exact minimum (counted on random weights). Takes the flags of `run`.",
    )
    add_run_arguments(p)
    p.set_defaults(func=run, takes_method_flags=True)


def run(args) -> int:
    from benchmark.cli.args import config_from_args
    from benchmark.runs.runner import run_experiment

    config = config_from_args(args)
    result = run_experiment(config, write=False, progress=True)
    print(format_profile(result))
    print(format_minimum(config))
    return 0


def format_minimum(config) -> str:
    """Executed vs the exact minimum of the paper's Table 1 schedule for this method on this
    run's backbone architecture (`benchmark/sweeps/perf.py`; random weights, counted on the real code)."""
    from benchmark.sweeps import perf

    schedule = perf.Schedule.paper()
    (report,) = perf.table_costs([(config.method, {"method_args": config.method_args})], config.backbone, schedule)
    e, m, p = report.executed.total, report.minimum.total, report.plain.total
    return (
        f"Table 1 schedule ({schedule.describe()}) on {config.backbone}, {config.method}: executed "
        f"{e / 1e15:,.2f} PFLOP, exact minimum {m / 1e15:,.2f} PFLOP ({perf.flop_ratio(e, m)}), plain path "
        f"{p / 1e15:,.2f} PFLOP ({perf.flop_ratio(p, m)}); per source: `fedbench bench`"
    )


def format_profile(result) -> str:
    from benchmark.runs.reporting import split_time

    rounds = result.federation.rounds
    if not rounds:
        return f"{result.config.method} trains nothing: no client-rounds to profile"
    split = split_time(rounds)
    client_rounds, total, model, data = split.client_rounds, split.total, split.model, split.data
    optimizer, overhead = split.optimizer, split.framework
    c = result.config
    lines = [
        f"{c.method} on {c.dataset}: {len(rounds)} rounds, {client_rounds} client-rounds, "
        f"{c.local_epochs} local epoch(s), batch {c.batch_size}, backbone {c.backbone}",
        f"device {result.summary['device']}, precision {result.summary['precision']}"
        + ("" if result.summary["precision"] == "32-true" else " (blocks' matmuls autocast, residual streams fp32)"),
        f"per client-round: {1000 * total / client_rounds:8.1f} ms total",
        f"  model compute:   {1000 * model / client_rounds:8.1f} ms",
        f"  data loading:    {1000 * data / client_rounds:8.1f} ms  ({100 * data / total:.1f}% of the round)",
        f"  optimizer setup: {1000 * optimizer / client_rounds:8.1f} ms  ({100 * optimizer / total:.1f}%: the method's "
        "configure_optimizers, a fresh optimizer per client-round)",
        f"  framework:       {1000 * overhead / client_rounds:8.1f} ms  ({100 * overhead / total:.1f}% of the round)",
    ]
    if str(result.summary["device"]).startswith("cuda"):
        lines.append(
            "  (on a GPU the steps run asynchronously: model compute is the time to launch them, and the "
            "wait for them falls into the framework's share; the per-client-round total is exact)"
        )
    rest = rounds[1:]
    if rest:  # the first round includes one-off warm-up (allocations, first optimizers)
        later = split_time(rest)
        steady = later.framework / later.client_rounds
        lines.append(f"  framework after round 1: {1000 * steady:.1f} ms per client-round")
    counted = result.timing.get("flops")
    if counted:
        lines.append(
            f"executed FLOPs: training {_giga(counted['train'])} ({_giga(counted['train'] / client_rounds)} per "
            f"client-round; {counted['train_steps_counted']} of {counted['train_steps']} steps counted, the rest "
            f"charged at the count of their kind), evaluation {_giga(counted['evaluation'])}, "
            f"frozen features {_giga(counted['features'])}"
        )
    return "\n".join(lines)


def _giga(flops: float) -> str:
    return f"{flops / 1e9:,.3f} GFLOP"
