"""`fedbench bench`: results/perf.md -- FLOPs of Table 1 executed vs the exact minimum,
the framework's share of a client-round, and wall time with and without the shortcuts."""

from __future__ import annotations

TABLE1_METHODS = ("zeroshot", "promptfl", "fedotp", "fedpgp", "pfedmoap", "clip_adapter", "lora", "pfedmma")
TARGET_RATIO = 1.2  # executed / minimum FLOPs, every method (issue 17)
TARGET_OVERHEAD = 5.0  # framework % of a client-round
MEMORY_BATCH = 32  # the paper's training batch size
MEMORY_CLASSES = 50  # a client's label space: base2novel trains over the base classes (Caltech101: 50)


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


def run(args) -> int:
    import os
    import platform
    import time

    import torch

    from benchmark.cli.outputs import check_output_file
    from benchmark.progress import progress_bar
    from benchmark.sweeps import perf

    started = time.perf_counter()
    load_before = os.getloadavg()
    if args.quick:
        backbone, schedule = "fedbench-tiny-vit", perf.Schedule.paper(datasets=("dtd",), seeds=1, rounds=2)
        method_args = {"pfedmma": {"first_block": 2}}  # the tiny CLIP has 4 blocks per tower
    else:
        backbone, schedule, method_args = args.backbone, perf.Schedule.paper(), {}
    methods = [(m, {"method_args": method_args.get(m, {})}) for m in args.methods]
    if args.memory_only:
        print(memory_section(methods, backbone))
        return 0
    out = check_output_file(args.out, "--out")  # before minutes of work (benchmark/cli/outputs.py)
    print(announce(out, args.quick), flush=True)
    configs = _overhead_configs(args.quick)
    # One bar over the steps: redirected, it prints a line every 30 s within a long step too.
    steps = progress_bar(total=len(configs) + 4, desc="fedbench bench", unit="steps")
    # Timed first, in the state a run starts from: after the ViT-B/16 counting below, the same
    # tiny-CLIP client-round took 1.4x as long in one process (14.1 against 10.1 ms; the
    # framework's 0.44 against 0.41 ms), which made its share look smaller than a run's.
    overhead = []
    for name, config in configs:
        steps.set_postfix_str(f"the framework's share of a client-round: {name}")
        overhead.append(_overhead(name, config))
        steps.update()
    steps.set_postfix_str(f"per-unit FLOPs on {backbone} (random weights), {len(methods)} methods")
    reports = perf.table_costs(methods, backbone, schedule, progress=True)
    worst, worst_ratio = perf.worst_ratio(reports)
    memory = memory_section(methods, backbone)
    steps.update()
    steps.set_postfix_str("runs with the shortcuts on and off")
    walls = _shortcut_walls(args.quick)
    steps.update()
    steps.set_postfix_str("evaluation with the clients batched and one by one")
    batched = _batched_evaluation_walls(args.quick)
    peak = matmul_gflops(MATMUL_SIZE)
    steps.update()
    steps.set_postfix_str("training with a round's clients batched and one by one")
    trained = _batched_training_walls(args.quick)
    steps.update()
    steps.close()
    for b in batched:
        if b["apart"]:  # fp32 on a CPU: batching may move last bits, never a prediction here
            raise RuntimeError(f"{b['name']}: batched evaluation scored a client {b['apart']} points apart")
    load_after = os.getloadavg()

    cpu = _cpu_name()
    lines = [
        "# Performance: FLOPs and time",
        "",
        f"Written by `fedbench bench{' --quick' if args.quick else ''}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"in {time.perf_counter() - started:.0f} s. Machine: {os.cpu_count()} CPUs ({cpu}), {platform.system()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} torch thread(s); load average (1 min) "
        f"{load_before[0]:.1f} at the start, {load_after[0]:.1f} at the end (other jobs share the machine: "
        "times are relative within one run, FLOPs do not depend on load).",
        "",
        f"## FLOPs of the Table 1 schedule on {backbone}",
        "",
        f"Schedule: {schedule.describe()}. Counted on the real method code over {backbone} with random weights; "
        "'plain path' is the same code with the exact shortcuts off (`--no-shortcuts`). How the units are "
        "counted and multiplied out, and what the minimum leaves out: `benchmark/sweeps/perf.py`.",
        "",
        perf.format_table(reports),
        "",
        f"Target executed / minimum <= {TARGET_RATIO}x for every method: "
        + ("met" if worst_ratio <= TARGET_RATIO else "**NOT met**")
        + f" (highest: {worst}, {worst_ratio:.2f}x).",
        "",
        "### By source (executed / minimum per method)",
        "",
        perf.format_sources(reports),
        "",
        memory,
        "",
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
        "## Wall time with the shortcuts on and off",
        "",
        "Each method run twice per pair, on then off, interleaved in one process (same data, features warm);"
        " the ratio is off / on of the whole run (training and evaluation).",
        "",
        "| run | shortcuts on | plain path | plain / on |",
        "|---|---:|---:|---:|",
        *[f"| {w['name']} | {w['on']:.2f} s | {w['off']:.2f} s | {w['off'] / w['on']:.2f}x |" for w in walls],
        "",
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
        "FLOP counting's own cost: a training step counted takes ~3-5x its time on the toy CLIP (Python per "
        "operation); runs count each kind of step once (`benchmark/flops.py`). "
        + "; ".join(
            f"{o['name']}: a run with counting took {o['counted_wall'] / o['wall']:.2f}x the run without"
            for o in overhead
        )
        + ".",
        "",
    ]
    report = "\n".join(lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    print(f"wrote {out}" + (" (this repository's report: `git diff` shows what moved)" if _shipped(out) else ""))
    met = worst_ratio <= TARGET_RATIO and all(o["share"] <= TARGET_OVERHEAD for o in overhead)
    return 0 if met else 1


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


def _overhead_configs(quick: bool):
    import tempfile
    from pathlib import Path

    from benchmark.config import build_config

    # The tiny-CLIP profile of results/perf-notes.md: a 40-class dataset in CoOp's DTD layout (generated here).
    root = describable_textures(Path(tempfile.mkdtemp(prefix="fedbench-bench-")), classes=40)
    tiny = dict(
        method="promptfl",
        dataset="dtd",
        data_root=str(root),
        backbone="fedbench-tiny-vit",
        pretrained="none",
        shots=8,
        rounds=2 if quick else 3,
        clients=10,
        local_epochs=1,
        wandb="disabled",
        seed=1,
        checkpoint_every=0,
    )
    configs = [
        (
            "PromptFL, tiny CLIP (random weights), 40-class DTD layout, 10 clients, 8 shots, 1 local epoch",
            build_config(tiny),
        )
    ]
    if not quick:
        toy = dict(
            method="promptfl",
            dataset="toy",
            clients=8,
            rounds=2,
            batch_size=8,
            wandb="disabled",
            seed=1,
            checkpoint_every=0,
        )
        configs.insert(0, ("PromptFL, toy world (toy CLIP), 8 clients, batch 8", build_config(toy)))
    return configs


def describable_textures(root, classes: int, train: int = 8, test: int = 2):
    """A DTD-shaped dataset of flat-coloured 32 px images: images/<class>/*.png and its
    split_zhou_DescribableTextures.json (what the CoOp loader reads)."""
    import json

    import numpy as np
    from PIL import Image

    folder = root / "dtd"
    rng = np.random.default_rng(0)
    split: dict[str, list] = {"train": [], "val": [], "test": []}
    for label in range(classes):
        name = f"texture{label:02d}"
        (folder / "images" / name).mkdir(parents=True, exist_ok=True)
        colour = rng.integers(0, 256, 3)
        for part, count in (("train", train), ("test", test)):
            for k in range(count):
                relative = f"{name}/{part}_{k}.png"
                pixels = np.clip(colour + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / "images" / relative)
                split[part].append([relative, label, name])
    (folder / "split_zhou_DescribableTextures.json").write_text(json.dumps(split))
    return root


def _overhead(name: str, config, repeats: int = 3) -> dict:
    """Framework share of a client-round, FLOP counting off: the median of `repeats` runs
    (single runs on shared cores swing by a few points); and a run with counting on."""
    import statistics
    import time

    from benchmark import flops
    from benchmark.federation.bare_loop import run_bare
    from benchmark.runs.preparation import prepare_run
    from benchmark.runs.reporting import split_time
    from benchmark.runs.runner import run_experiment

    run_experiment(config, write=False, progress=False)  # warm: features, allocations
    measured = []
    for _ in range(repeats):
        t = time.perf_counter()
        with flops.off():
            result = run_experiment(config, write=False, progress=False)
        wall = time.perf_counter() - t
        split = split_time(result.federation.rounds)
        client_rounds, total, model, data = split.client_rounds, split.total, split.model, split.data
        optimizer, framework = split.optimizer, split.framework
        with flops.off():  # the same client-rounds by the bare loop, right after
            bare = run_bare(prepare_run(config, progress=False).simulator())
        bare_rest = bare.rest_seconds / bare.client_rounds
        measured.append(
            dict(
                name=name,
                client_rounds=client_rounds,
                total_ms=1000 * total / client_rounds,
                model_ms=1000 * model / client_rounds,
                data_ms=1000 * data / client_rounds,
                optimizer_ms=1000 * optimizer / client_rounds,
                optimizer_share=100 * optimizer / total,
                beyond_model_share=100 * (total - model) / total,
                framework_ms=1000 * framework / client_rounds,
                share=100 * framework / total,
                data_share=100 * data / total,
                wall=wall,
                bare_rest_ms=1000 * bare_rest,
                added_share=100 * (framework / client_rounds - bare_rest) / (total / client_rounds),
            )
        )
    median = sorted(measured, key=lambda m: m["share"])[len(measured) // 2]
    t = time.perf_counter()
    run_experiment(config, write=False, progress=False)
    return dict(
        median,
        counted_wall=time.perf_counter() - t,
        shares=[m["share"] for m in measured],
        spread=statistics.pstdev([m["share"] for m in measured]),
    )


def _batched_evaluation_walls(quick: bool) -> list[dict]:
    if quick:
        base = dict(dataset="toy", backbone="fedbench-tiny-vit", pretrained="none", shots=4, clients=4, seed=1)
        return time_batched_evaluation(base, [("promptfl, tiny CLIP", "promptfl", {})])
    base = dict(dataset="toy", clients=8, seed=1)
    runs = [
        ("pfedmma, toy world", "pfedmma", {"first_block": 2}),
        ("promptfl, toy world", "promptfl", {}),
        ("lora, toy world", "lora", {}),
    ]
    return time_batched_evaluation(base, runs)


def spread_apart(module, seed: int, scale: float = 0.01) -> None:
    """Add seeded noise to `module`'s trainable parameters (a client's personal state). The
    noise is drawn on the CPU, the same numbers on every device, and moved to each parameter's
    device: adding CPU noise to CUDA parameters crashed scripts/gpu_check.sh (issue 48)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            if parameter.requires_grad:
                noise = torch.randn(parameter.shape, generator=generator) * scale
                parameter.add_(noise.to(parameter.device, parameter.dtype))


def time_batched_evaluation(base: dict, runs: list[tuple[str, str, dict]]) -> list[dict]:
    """For each (label, method, method_args) in `runs` on the run settings `base`: a round's
    evaluation of every client timed with batched evaluation on and off, alternated, the
    median of three after one untimed pass of each (also scripts/gpu_check.sh's)."""
    import statistics
    import time

    import torch

    from benchmark import flops, shortcuts
    from benchmark.config import build_config
    from benchmark.evaluation.accuracy import Evaluator
    from benchmark.evaluation.client_metrics import evaluate_clients
    from benchmark.runs.preparation import SHARED_FEATURES, autocast_context, prepare_run

    walls = []
    for name, method, method_args in runs:
        config = build_config({**base, "method": method, "wandb": "disabled"}, {"method_args": method_args})
        with shortcuts.use(config.shortcuts):
            run = prepare_run(config, progress=False, train_features=False)
            states = {}
            for client in run.partition.clients:  # personal states, apart from each other
                spread_apart(run.method, client.client_id)
                states[client.client_id] = run.method.client_state()

            def evaluate(batched: bool) -> tuple[float, dict]:
                evaluator = Evaluator(  # a fresh one: nothing memoized
                    run.method, run.dataset.test, SHARED_FEATURES, config.eval_batch_size, batched=batched
                )
                started = time.perf_counter()
                with autocast_context(run.device, run.precision):  # as a run evaluates
                    per_client, _ = evaluate_clients(
                        evaluator, run.protocol, run.dataset, run.partition, states, progress=False
                    )
                if run.device.startswith("cuda"):
                    torch.cuda.synchronize()
                return time.perf_counter() - started, per_client

            evaluate(True), evaluate(False)  # warm: features, image prefixes, the probe
            with flops.ledger(sample_steps=False) as counted:  # untimed: counting costs time
                evaluate(False)
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(3):
                results = {}
                for batched in (True, False):
                    wall, results[batched] = evaluate(batched)
                    times[batched].append(wall)
            apart = max(  # the largest difference of a client's metric (0: the same predictions)
                abs(value - results[False][cid][metric])
                for cid, metrics in results[True].items()
                for metric, value in metrics.items()
            )
        walls.append(
            dict(
                name=name,
                clients=len(states),
                images=len(run.dataset.test),
                batched=statistics.median(times[True]),
                sequential=statistics.median(times[False]),
                apart=apart,
                flops=counted.summary().get("evaluation", 0),
            )
        )
    return walls


MATMUL_SIZE = 1024


def matmul_gflops(size: int = MATMUL_SIZE, repeats: int = 5) -> float:
    """What this process's torch does on one large fp32 matrix product, in GFLOP/s: a bound
    on any pass of the same arithmetic, however it is batched (the best of `repeats`)."""
    import time

    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def _batched_training_walls(quick: bool) -> list[dict]:
    if quick:
        base = dict(
            dataset="toy", backbone="fedbench-tiny-vit", pretrained="none", shots=4, clients=4, rounds=2, seed=1
        )
        return time_batched_training(base, [("promptfl, tiny CLIP", "promptfl", {})], repeats=1)
    base = dict(dataset="toy", clients=8, batch_size=8, rounds=3, seed=1)
    runs = [
        ("pfedmma, toy world", "pfedmma", {"first_block": 2}),
        ("promptfl, toy world", "promptfl", {}),
        ("lora, toy world", "lora", {}),
    ]
    return time_batched_training(base, runs)


def time_batched_training(base: dict, runs: list[tuple[str, str, dict]], repeats: int = 3) -> list[dict]:
    """For each (label, method, method_args) in `runs` on the run settings `base`: the
    rounds' wall time (local training, state swaps, aggregation; not the evaluation) with
    batched training on and off, alternated, the median of `repeats` after one untimed run
    of each; whether the clients did train together, and how far apart the two runs'
    metrics ended (also scripts/gpu_check.sh's)."""
    import dataclasses
    import statistics
    import warnings

    from benchmark.config import build_config
    from benchmark.runs.runner import run_experiment

    walls = []
    for name, method, method_args in runs:
        config = build_config(
            {**base, "method": method, "wandb": "disabled", "checkpoint_every": 0}, {"method_args": method_args}
        )

        def train(batched: bool):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = run_experiment(
                    dataclasses.replace(config, batched_training=batched), write=False, progress=False
                )
            fallback = [str(w.message) for w in caught if "train one by one" in str(w.message)]
            return sum(log.total_seconds for log in result.federation.rounds), result, fallback

        train(True), train(False)  # warm: features, caches, the probe
        times: dict[bool, list[float]] = {True: [], False: []}
        results, fallback = {}, []
        for _ in range(repeats):
            for batched in (True, False):
                wall, results[batched], caught = train(batched)
                times[batched].append(wall)
                fallback = fallback or caught
        apart = max(  # the largest difference of a client's metric, in points
            abs(value - results[False].per_client[cid][metric])
            for cid, metrics in results[True].per_client.items()
            for metric, value in metrics.items()
        )
        steps = {b: results[b].timing.get("flops", {}).get("train_steps") for b in (True, False)}
        walls.append(
            dict(
                name=name,
                rounds=len(results[True].federation.rounds),
                batched=statistics.median(times[True]),
                sequential=statistics.median(times[False]),
                together=not fallback,
                reason=fallback[0].split("(", 1)[-1].rstrip(")") if fallback else "",
                apart=apart,
                steps=steps,
            )
        )
    return walls


def _shortcut_walls(quick: bool) -> list[dict]:
    import dataclasses
    import time

    from benchmark.config import build_config
    from benchmark.runs.runner import run_experiment

    if quick:
        base = dict(
            dataset="toy",
            backbone="fedbench-tiny-vit",
            pretrained="none",
            shots=4,
            rounds=1,
            clients=4,
            local_epochs=1,
            batch_size=8,
            wandb="disabled",
            seed=1,
            checkpoint_every=0,
        )
        runs = [("promptfl, tiny CLIP", {"method": "promptfl"})]
    else:
        base = dict(dataset="toy", rounds=2, clients=8, batch_size=8, wandb="disabled", seed=1, checkpoint_every=0)
        runs = [
            ("promptfl, toy world, 2 rounds", {"method": "promptfl"}),
            ("pfedmoap, toy world, 2 rounds", {"method": "pfedmoap", "method_args": {"gate_heads": 4}}),
            ("lora, toy world, 2 rounds", {"method": "lora"}),
            ("pfedmma, toy world, 2 rounds", {"method": "pfedmma", "method_args": {"first_block": 2}}),
        ]
    walls = []
    for name, settings in runs:
        method_args = settings.get("method_args", {})
        config = build_config({**base, "method": settings["method"]}, {"method_args": method_args})
        run_experiment(config, write=False, progress=False)  # warm
        times = {"on": 0.0, "off": 0.0}
        for _ in range(2):
            for key, on in (("on", True), ("off", False)):
                t = time.perf_counter()
                run_experiment(dataclasses.replace(config, shortcuts=on), write=False, progress=False)
                times[key] += time.perf_counter() - t
        walls.append(dict(name=name, on=times["on"] / 2, off=times["off"] / 2))
    return walls
