"""`fedbench bench`: results/perf.md -- FLOPs of Table 1 executed vs the exact minimum,
the framework's share of a client-round, and wall time with and without the shortcuts."""

from __future__ import annotations

from dataclasses import dataclass

TABLE1_METHODS = ("zeroshot", "promptfl", "fedotp", "fedpgp", "pfedmoap", "clip_adapter", "lora", "pfedmma")
TARGET_RATIO = 1.2  # executed / minimum FLOPs, every method (issue 17)
TARGET_OVERHEAD = 5.0  # framework % of a client-round
MEMORY_BATCH = 32  # the paper's training batch size
MEMORY_CLASSES = 50  # a client's label space: base2novel trains over the base classes (Caltech101: 50)
MATMUL_SIZE = 1024  # the matrix product whose rate bounds batched evaluation


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="write results/perf.md: Table 1 FLOPs executed vs minimum, framework share, shortcut speed-up",
        description="Counts the FLOPs of each method's units on the backbone architecture (random weights, "
        "no download) and multiplies them out over the paper's Table 1 schedule, as this code runs it and as "
        "an exact implementation needs it; times the framework's share of a client-round on the toy world "
        "and on the tiny CLIP, and what a bare loop of the same client-rounds pays beyond the model "
        "(benchmark/federation/bare_loop.py); and times short toy runs with the exact shortcuts on and off, interleaved in "
        "one process. Prints the report and writes it to --out. Exits 1 when a target is missed.",
    )
    p.add_argument("--out", default="results/perf.md", help="the report file (default: results/perf.md)")
    p.add_argument("--backbone", default="ViT-B-16", help="architecture the FLOPs are counted on (default: ViT-B-16)")
    p.add_argument("--methods", nargs="+", default=list(TABLE1_METHODS), help="methods (default: Table 1's eight)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: tiny CLIP, one dataset and seed, 2 rounds, no toy-CLIP runs (seconds, for tests)",
    )
    p.add_argument(
        "--memory-only",
        action="store_true",
        help="only the peak memory of each method's training step and evaluation on --backbone (random weights, "
        f"batch {MEMORY_BATCH}, {MEMORY_CLASSES} classes, on the CPU): printed, no report written",
    )
    p.set_defaults(func=run)


def memory_section(methods, backbone: str) -> str:
    """The report's memory section: each method's peaks on `backbone` (random weights, CPU)."""
    from benchmark.sweeps.memory_use import format_memory, method_memory

    reports = method_memory(methods, backbone, MEMORY_BATCH, MEMORY_CLASSES, "cpu", progress=True)
    return "\n".join(
        [
            f"## Peak memory per method on {backbone}",
            "",
            f"One training step (forward and backward, batch {MEMORY_BATCH}, {MEMORY_CLASSES} classes) and one "
            f"evaluation batch ({MEMORY_BATCH} images over the {MEMORY_CLASSES} classes), random weights, on the "
            "CPU, with the meter a run uses (`benchmark/memory.py`; how: `benchmark/sweeps/memory_use.py`). "
            "'peak RSS' includes the process (the backbone's weights); 'above start' is the phase's own share.",
            "",
            format_memory(reports),
        ]
    )


@dataclass
class Measurements:
    """What `fedbench bench` measured, for its report."""

    overhead: list[dict]  # the framework's share of a client-round, per setting
    costs: list  # the Table 1 schedule's FLOPs per method (`perf.table_costs`)
    memory: str  # the report's memory section
    walls: list[dict]  # runs with the shortcuts on and off
    batched: list[dict]  # evaluation with the clients batched and one by one
    peak: float  # GFLOP/s of one large matrix product in this process
    trained: list[dict]  # training with a round's clients batched and one by one
    load: tuple[float, float]  # load average (1 min) at the start and at the end


def run(args) -> int:
    import time

    from benchmark.cli.outputs import check_output_file
    from benchmark.files import atomic_write

    started = time.perf_counter()
    backbone, schedule, methods = bench_setting(args)
    if args.memory_only:
        print(memory_section(methods, backbone))
        return 0
    out = check_output_file(args.out, "--out")  # before minutes of work (benchmark/cli/outputs.py)
    print(announce(out, args.quick), flush=True)
    measured = measure(methods, backbone, schedule, args.quick)
    report = report_text(measured, backbone, schedule, args.quick, started)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, report)
    print(report)
    print(f"wrote {out}" + (" (this repository's report: `git diff` shows what moved)" if _shipped(out) else ""))
    return 0 if targets_met(measured) else 1


def bench_setting(args):
    """(backbone, schedule, methods with their method_args) the flags ask for."""
    from benchmark.sweeps import perf

    if args.quick:
        backbone, schedule = "fedbench-tiny-vit", perf.Schedule.paper(datasets=("dtd",), seeds=1, rounds=2)
        method_args = {"pfedmma": {"first_block": 2}}  # the tiny CLIP has 4 blocks per tower
    else:
        backbone, schedule, method_args = args.backbone, perf.Schedule.paper(), {}
    methods = [(m, {"method_args": method_args.get(m, {})}) for m in args.methods]
    return backbone, schedule, methods


def measure(methods, backbone: str, schedule, quick: bool) -> Measurements:
    """Every measurement of the report, in order, under one progress bar."""
    import os

    from benchmark.progress import progress_bar
    from benchmark.sweeps import perf, timings

    load_before = os.getloadavg()
    configs = timings.overhead_configs(quick)
    # One bar over the steps: redirected, it prints a line every 30 s within a long step too.
    steps = progress_bar(total=len(configs) + 4, desc="fedbench bench", unit="steps")
    # Timed first, in the state a run starts from: after the ViT-B/16 counting below, the same
    # tiny-CLIP client-round took 1.4x as long in one process (14.1 against 10.1 ms; the
    # framework's 0.44 against 0.41 ms), which made its share look smaller than a run's.
    overhead = []
    for name, config in configs:
        steps.set_postfix_str(f"the framework's share of a client-round: {name}")
        overhead.append(timings.framework_share(name, config))
        steps.update()
    steps.set_postfix_str(f"per-unit FLOPs on {backbone} (random weights), {len(methods)} methods")
    costs = perf.table_costs(methods, backbone, schedule, progress=True)
    memory = memory_section(methods, backbone)
    steps.update()
    steps.set_postfix_str("runs with the shortcuts on and off")
    walls = timings.shortcut_walls(quick)
    steps.update()
    steps.set_postfix_str("evaluation with the clients batched and one by one")
    batched = timings.batched_evaluation_walls(quick)
    peak = timings.matmul_gflops(MATMUL_SIZE)
    steps.update()
    steps.set_postfix_str("training with a round's clients batched and one by one")
    trained = timings.batched_training_walls(quick)
    steps.update()
    steps.close()
    for b in batched:
        if b["apart"]:  # fp32 on a CPU: batching may move last bits, never a prediction here
            raise RuntimeError(f"{b['name']}: batched evaluation scored a client {b['apart']} points apart")
    return Measurements(overhead, costs, memory, walls, batched, peak, trained, (load_before, os.getloadavg()))


def targets_met(measured: Measurements) -> bool:
    """Whether every method's executed FLOPs are within TARGET_RATIO of the minimum and every
    setting's framework share within TARGET_OVERHEAD."""
    from benchmark.sweeps import perf

    _, worst_ratio = perf.worst_ratio(measured.costs)
    return worst_ratio <= TARGET_RATIO and all(o["share"] <= TARGET_OVERHEAD for o in measured.overhead)


def report_text(measured: Measurements, backbone: str, schedule, quick: bool, started: float) -> str:
    """results/perf.md: the machine, then a section per measurement."""
    lines = [
        *_machine_lines(measured.load, quick, started),
        *_flops_lines(measured.costs, backbone, schedule),
        measured.memory,
        "",
        *_overhead_lines(measured.overhead),
        *_shortcut_lines(measured.walls),
        *_evaluation_lines(measured.batched, measured.peak),
        *_training_lines(measured.trained),
        *_counting_lines(measured.overhead),
    ]
    return "\n".join(lines)


def _machine_lines(load: tuple[float, float], quick: bool, started: float) -> list[str]:
    import os
    import platform
    import time

    import torch

    cpu = _cpu_name()
    return [
        "# Performance: FLOPs and time",
        "",
        f"Written by `fedbench bench{' --quick' if quick else ''}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {time.perf_counter() - started:.0f} s. Machine: {os.cpu_count()} CPUs ({cpu}), {platform.system()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s); load average (1 min) "
        f"{load[0][0]:.1f} at the start, {load[1][0]:.1f} at the end (other jobs share the machine: "
        "times are relative within one run, FLOPs do not depend on load).",
        "",
    ]


def _flops_lines(costs: list, backbone: str, schedule) -> list[str]:
    from benchmark.sweeps import perf

    worst, worst_ratio = perf.worst_ratio(costs)
    return [
        f"## FLOPs of the Table 1 schedule on {backbone}",
        "",
        f"Schedule: {schedule.describe()}. Counted on the real method code over {backbone} with random weights; "
        "'plain path' is the same code with the exact shortcuts off (`--no-shortcuts`). How the units are "
        "counted and multiplied out, and what the minimum leaves out: `benchmark/sweeps/perf.py`.",
        "",
        perf.format_table(costs),
        "",
        f"Target executed / minimum <= {TARGET_RATIO}x for every method: "
        + ("met" if worst_ratio <= TARGET_RATIO else "**NOT met**")
        + f" (highest: {worst}, {worst_ratio:.2f}x).",
        "",
        "### By source (executed / minimum per method)",
        "",
        perf.format_sources(costs),
        "",
    ]


def _overhead_lines(overhead: list[dict]) -> list[str]:
    return [
        "## Framework share of a client-round",
        "",
        "Per client-round: the model's steps (forward, backward, optimizer step); data loading (fetching, "
        "decoding, augmenting and collating the batches; here cached features or small images); the method's "
        "`configure_optimizers` (the fresh optimizer and scheduler every client-round gets: the method's own "
        "code, which any exact loop runs); and the framework, everything else: seeding, state swaps, download "
        "and upload, reading the optimizers as Lightning does and the loop around the steps. The target is on "
        "the framework share; 'all but the model' is the share of everything but the model's steps. FLOP "
        "counting off; the median of three runs by framework share (all three framework shares in the last "
        "column).",
        "",
        "Part of the framework's time is paid by any loop: seeding, loading and copying out the client's state, "
        "stepping the scheduler, and the cold caches the model's step leaves to whatever Python runs next. "
        "'bare loop' is that part: the same client-rounds (equal states, bit for bit) run right after by the "
        "shortest loop that computes them (`benchmark/federation/bare_loop.py`: no hooks, checks, ledger or logs), its "
        "time beyond the model, the data and configure_optimizers; 'added' is the framework's excess over it, "
        "as a share of the client-round.",
        "",
        "| setting | client-rounds | per client-round | model | data loading | configure_optimizers | framework | "
        "framework share | all but the model | bare loop | added | three runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *[
            f"| {o['name']} | {o['client_rounds']} | {o['total_ms']:.1f} ms | {o['model_ms']:.1f} ms | "
            f"{o['data_ms']:.2f} ms ({o['data_share']:.1f} %) | {o['optimizer_ms']:.2f} ms ({o['optimizer_share']:.1f} %) | "
            f"{o['framework_ms']:.2f} ms | {o['share']:.1f} % | {o['beyond_model_share']:.1f} % | "
            f"{o['bare_rest_ms']:.2f} ms | {o['added_share']:.1f} % | "
            f"{', '.join(f'{v:.1f}' for v in o['shares'])} % |"
            for o in overhead
        ],
        "",
        f"Target <= {TARGET_OVERHEAD:.0f} %: "
        + ("met" if all(o["share"] <= TARGET_OVERHEAD for o in overhead) else "**NOT met**")
        + ".",
        "",
    ]


def _shortcut_lines(walls: list[dict]) -> list[str]:
    return [
        "## Wall time with the shortcuts on and off",
        "",
        "Each method run twice per pair, on then off, interleaved in one process (same data, features warm);"
        " the ratio is off / on of the whole run (training and evaluation).",
        "",
        "| run | shortcuts on | plain path | plain / on |",
        "|---|---:|---:|---:|",
        *[f"| {w['name']} | {w['on']:.2f} s | {w['off']:.2f} s | {w['off'] / w['on']:.2f}x |" for w in walls],
        "",
    ]


def _evaluation_lines(batched: list[dict], peak: float) -> list[str]:
    return [
        "## Evaluation: clients batched and one by one",
        "",
        "A round's evaluation of every client (Local, Base, Novel under base2novel), with each client's state "
        "moved apart by seeded noise, timed with `--batched-evaluation` on (one vmapped pass for the clients "
        "that share test images and classes, `benchmark/evaluation/batched.py`) and off, alternated in one "
        "process after one untimed pass of each (features and image prefixes cached); the median of three. "
        "Both give the same per-client metrics (checked here). Training is client by client in both.",
        "",
        "| evaluation | clients | test images | batched | one by one | one by one / batched | GFLOP | "
        "one by one, GFLOP/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {b['name']} | {b['clients']} | {b['images']} | {b['batched']:.2f} s | {b['sequential']:.2f} s | "
            f"{b['sequential'] / b['batched']:.2f}x | {b['flops'] / 1e9:.1f} | {b['flops'] / 1e9 / b['sequential']:.1f} |"
            for b in batched
        ],
        "",
        f"A {MATMUL_SIZE}x{MATMUL_SIZE} fp32 matrix product ran at {peak:.1f} GFLOP/s in this process: batching "
        "removes per-operation overhead, never arithmetic, so where one by one already runs near that rate "
        "(evaluation scores batches of 256 images) no batching can speed it up by more than the ratio of the two.",
        "",
    ]


def _training_lines(trained: list[dict]) -> list[str]:
    return [
        "## Training: a round's clients batched and one by one",
        "",
        "The rounds of a run (local training, state swaps, aggregation; not its evaluation) with "
        "`--batched-training` on (one vmapped pass per step for a round's clients, "
        "`benchmark/federation/batched_training.py`) and off, alternated in one process after one untimed run "
        "of each; the median of three. 'apart': the largest difference of a client's final metric between the "
        "two, in points (0: the same predictions).",
        "",
        "| training | rounds | batched | one by one | one by one / batched | optimizer steps (batched / one by one) "
        "| apart |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {t['name']} | {t['rounds']} | {t['batched']:.2f} s | {t['sequential']:.2f} s | "
            + (f"{t['sequential'] / t['batched']:.2f}x" if t["together"] else f"one by one in both: {t['reason']}")
            + f" | {t['steps'][True]} / {t['steps'][False]} | {t['apart']:.2f} |"
            for t in trained
        ],
        "",
    ]


def _counting_lines(overhead: list[dict]) -> list[str]:
    return [
        "FLOP counting's own cost: a training step counted takes ~3-5x its time on the toy CLIP (Python per "
        "operation); runs count each kind of step once (`benchmark/flops.py`). "
        + "; ".join(
            f"{o['name']}: a run with counting took {o['counted_wall'] / o['wall']:.2f}x the run without"
            for o in overhead
        )
        + ".",
        "",
    ]


def announce(out, quick: bool) -> str:
    """What the command is about to do: how long it took last time (from the report it
    rewrites) and which file it rewrites, said before the minutes it runs."""
    import re

    previous = out.read_text() if out.is_file() else ""
    took = re.search(r"in (\d+) s\. Machine", previous)
    how_long = (
        "seconds"
        if quick
        else f"{int(took.group(1)) // 60 + 1} minutes or so (the report there took {took.group(1)} s)"
        if took
        else "10 minutes or more on a laptop CPU"
    )
    rewrites = (
        f"rewrites {out}, this repository's report (--out FILE writes elsewhere)"
        if _shipped(out)
        else f"writes {out}" + (" over the report there" if previous else "")
    )
    return f"fedbench bench: {how_long}; {rewrites} when it is done"


def _shipped(out) -> bool:
    """Whether `out` is the results/perf.md of this checkout (tracked: the shipped report)."""
    from pathlib import Path

    return Path(out).resolve() == Path(__file__).resolve().parents[3] / "results" / "perf.md"


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown CPU"
