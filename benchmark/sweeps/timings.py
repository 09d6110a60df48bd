"""The wall times `fedbench bench` reports (and scripts/gpu_check.py's): the framework's share
of a client-round, runs with the exact shortcuts on and off, evaluation and training with a
round's clients batched and one by one, and the rate of one large matrix product that bounds
them; on the toy world, or on the tiny CLIP over a generated dataset in DTD's layout."""

from __future__ import annotations

import dataclasses
import json
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmark import flops
from benchmark.config import build_config
from benchmark.evaluation.accuracy import Evaluator
from benchmark.evaluation.client_metrics import evaluate_clients
from benchmark.federation.bare_loop import run_bare
from benchmark.runs.numerics import computing_as
from benchmark.runs.preparation import SHARED_FEATURES, autocast_context, prepare_run
from benchmark.runs.reporting import split_time
from benchmark.runs.runner import run_experiment

# The toy-world run both timings use (a method added to it): 2 rounds, 8 clients, batch 8.
TOY_RUN = dict(dataset="toy", rounds=2, clients=8, batch_size=8, wandb="disabled", seed=1, checkpoint_every=0)


def overhead_configs(quick: bool):
    """(label, config) of the runs whose framework share is timed: PromptFL on the tiny CLIP over
    a generated dataset and, unless `quick`, on the toy world."""
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
        toy = build_config({**TOY_RUN, "method": "promptfl"})
        configs.insert(0, ("PromptFL, toy world (toy CLIP), 8 clients, batch 8", toy))
    return configs


def describable_textures(root, classes: int, train: int = 8, test: int = 2, side: int = 32):
    """A DTD-shaped dataset of flat-coloured `side` px images: images/<class>/*.png and its
    split_zhou_DescribableTextures.json (what the CoOp loader reads). scripts/gpu_check.py
    asks for DTD's size (~470 px), so that decoding and augmenting cost what they cost there."""
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
                pixels = np.clip(colour + rng.normal(0, 20, (side, side, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / "images" / relative)
                split[part].append([relative, label, name])
    (folder / "split_zhou_DescribableTextures.json").write_text(json.dumps(split))
    return root


def framework_share(name: str, config, repeats: int = 3) -> dict:
    """Framework share of a client-round, FLOP counting off: the median of `repeats` runs
    (single runs on shared cores swing by a few points); and a run with counting on."""
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
        with flops.off(), computing_as(config):  # the same client-rounds by the bare loop, right after
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


def batched_evaluation_walls(quick: bool) -> list[dict]:
    """`time_batched_evaluation` on the report's runs (`quick`: one on the tiny CLIP)."""
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
    walls = []
    for name, method, method_args in runs:
        config = build_config({**base, "method": method, "wandb": "disabled"}, {"method_args": method_args})
        with computing_as(config):  # as a run computes (prepare_run's contract)
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


def matmul_gflops(size: int, repeats: int = 5) -> float:
    """What this process's torch does on one large fp32 matrix product, in GFLOP/s: a bound
    on any pass of the same arithmetic, however it is batched (the best of `repeats`)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9


def batched_training_walls(quick: bool) -> list[dict]:
    """`time_batched_training` on the report's runs (`quick`: one on the tiny CLIP, one repeat)."""
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


def shortcut_walls(quick: bool) -> list[dict]:
    """Each run's wall time with the exact shortcuts on and off: after one warm run, two pairs
    interleaved, the mean of each (`quick`: one run on the tiny CLIP)."""
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
        base = TOY_RUN
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
