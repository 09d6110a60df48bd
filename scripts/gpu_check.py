"""Times every Table 1 method on ViT-B/16 (random weights: the real architecture, no download)
on a CUDA GPU at three shapes and writes `results/gpu.md` (what `scripts/gpu_check.sh` runs).

Per method and shape: one federation of 10 clients on a generated DTD-layout dataset (16
shots, 2 local epochs, batch 32, augmentation on, as Table 1), `--precision auto` (each
method's gpu_precision). Round 1 warms up (cuDNN autotuning, the allocator, first
optimizers, device caches); round 2 is timed. The three shapes are Table 1's range of client
sizes: 47, 100 and 397 classes (DTD, Caltech101-sized, SUN397), whose base halves dealt to 10
clients give about 32, 80 and 320 training images per client.

Steps are timed on the host: a GPU runs them asynchronously, so "model steps" is the time to
launch them, and the per-client-round total (which waits for the state copy) is the figure.
"GPU share" is the GPU's kernel time over the wall time of a client-round (torch.profiler, in
a separate run at the first shape, so that profiling slows no timed figure).

    python scripts/gpu_check.py [--out results/gpu.md] [--shapes 47,100,397] [--methods promptfl,...]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as `python scripts/gpu_check.py` from anywhere
    sys.path.insert(0, str(ROOT))

SHAPES = (47, 100, 397)  # classes of the generated datasets (Table 1's DTD, ~Caltech101, SUN397)
TABLE1_CLIENTS = 10


@dataclass
class MethodTiming:
    """One method at one shape: per client-round milliseconds and the rate."""

    method: str
    classes: int
    precision: str
    images_per_client: float
    total_ms: float = 0.0
    model_ms: float = 0.0
    data_ms: float = 0.0
    rest_ms: float = 0.0
    tflops: float = float("nan")  # training FLOPs / whole client-round seconds
    train_flops: float = 0.0
    seconds: float = 0.0
    trains: bool = True
    gpu_share: float | None = None  # kernel time / wall time of a client-round (first shape only)


@dataclass
class Report:
    device_name: str
    versions: str
    date: str
    setup: str  # what was timed, in words
    timings: list[MethodTiming] = field(default_factory=list)
    evaluation: list[dict] = field(default_factory=list)
    training: list[dict] = field(default_factory=list)
    compiled: list[tuple[MethodTiming, MethodTiming]] = field(default_factory=list)  # (eager, compiled blocks)
    table1_flops: float | None = None  # the dry run's estimate of Table 1 (benchmark/sweeps/cost.py)
    notes: list[str] = field(default_factory=list)

    @property
    def rate_tflops(self) -> float | None:
        """All timed methods and shapes together: their training FLOPs over their client-round seconds."""
        flops = sum(t.train_flops for t in self.timings if t.trains)
        seconds = sum(t.seconds for t in self.timings if t.trains)
        return flops / seconds / 1e12 if flops and seconds else None


def run_base(root: Path, device: str, backbone: str, clients: int = TABLE1_CLIENTS) -> dict:
    return dict(
        dataset="dtd",
        data_root=str(root),
        backbone=backbone,
        pretrained="none",
        shots=16,
        rounds=2,
        local_epochs=2,
        clients=clients,
        class_dealing="authors",
        batch_size=32,
        augment=True,
        device=device,
        precision="auto",
        num_workers=4 if device.startswith("cuda") else 0,
        wandb="disabled",
        seed=1,
        checkpoint_every=0,
    )


def time_method(name: str, classes: int, base: dict) -> MethodTiming:
    """One federation of `name` on `base`; its last round timed."""
    import torch

    from benchmark.config import build_config
    from benchmark.runs.reporting import split_time
    from benchmark.runs.runner import run_experiment

    config = build_config({**base, "method": name})
    if str(base["device"]).startswith("cuda"):
        torch.cuda.synchronize()
    result = run_experiment(config, write=False, progress=False)
    timed = result.federation.rounds[1:] or result.federation.rounds
    client_rounds = sum(len(r.clients) for r in timed)
    images = images_per_client(classes, config.shots, config.clients)
    timing = MethodTiming(name, classes, str(result.summary["precision"]), images)
    if not client_rounds:
        timing.trains = False
        return timing
    split = split_time(timed)
    timing.total_ms = 1000 * split.total / client_rounds
    timing.model_ms = 1000 * split.model / client_rounds
    timing.data_ms = 1000 * split.data / client_rounds
    timing.rest_ms = timing.total_ms - timing.model_ms - timing.data_ms
    timing.train_flops = float(sum(r.train_flops for r in timed))
    timing.seconds = sum(r.total_seconds for r in timed)
    timing.tflops = timing.train_flops / timing.seconds / 1e12 if timing.train_flops else float("nan")
    return timing


def images_per_client(classes: int, shots: int = 16, clients: int = TABLE1_CLIENTS) -> float:
    """The mean training images of a client: the base half of the classes (CoOp's ceil(C / 2))
    x the shots, dealt to the clients."""
    return -(-classes // 2) * shots / clients


def gpu_share(name: str, base: dict) -> float | None:
    """Kernel time over wall time of round 2's client-rounds of `name`, profiled (CUDA only)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmark.config import build_config
    from benchmark.federation.simulator import FederatedSimulator
    from benchmark.runs.runner import run_experiment

    if not str(base["device"]).startswith("cuda"):
        return None
    measured: dict[str, float] = {}
    train_round = FederatedSimulator.train_round

    def profiled(self, sampled, round_index, states, received):
        if round_index != 1:
            return train_round(self, sampled, round_index, states, received)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            started = time.perf_counter()
            out = train_round(self, sampled, round_index, states, received)
            torch.cuda.synchronize()
            measured["wall"] = time.perf_counter() - started
        kernels = sum(getattr(e, "self_device_time_total", 0.0) for e in prof.key_averages())
        measured["busy"] = kernels / 1e6  # microseconds
        return out

    FederatedSimulator.train_round = profiled
    try:
        run_experiment(build_config({**base, "method": name}), write=False, progress=False)
    finally:
        FederatedSimulator.train_round = train_round
    return measured["busy"] / measured["wall"] if measured.get("wall") else None


def table1_flops() -> float | None:
    """The dry run's estimate of Table 1 (`fedbench reproduce base2novel --dry-run`'s cost line)."""
    from benchmark.sweeps.cost import preset_cost
    from benchmark.sweeps.presets import load_preset

    try:
        preset = load_preset("base2novel")
        cost = preset_cost(preset.cells())
    except Exception as exc:  # the report is still worth writing without the estimate
        print(f"gpu_check: no Table 1 estimate ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return None
    return cost.flops if not cost.unknown else None


def render(report: Report) -> str:
    from benchmark.sweeps.gpu_rate import rate_comment

    lines = [
        "# GPU timings",
        "",
        f"Written by `bash scripts/gpu_check.sh` on {report.date}: {report.device_name}; {report.versions}.",
        f"Every figure below comes from that one run. {report.setup}; round 1 warms up, round 2 is timed.",
        "",
        "## A client-round of every Table 1 method",
        "",
        "| method | classes | images per client | precision | per client-round | model steps | data loading "
        "| framework + configure_optimizers | training TFLOP/s | GPU share |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for t in report.timings:
        if not t.trains:
            lines.append(f"| {t.method} | {t.classes} | – | {t.precision} | trains nothing | – | – | – | – | – |")
            continue
        share = f"{100 * t.gpu_share:.0f} %" if t.gpu_share is not None else "–"
        lines.append(
            f"| {t.method} | {t.classes} | {t.images_per_client:.0f} | {t.precision} | {t.total_ms:.0f} ms | "
            f"{t.model_ms:.0f} ms | {t.data_ms:.0f} ms | {t.rest_ms:.0f} ms "
            f"({100 * t.rest_ms / t.total_ms:.0f} %) | {t.tflops:.1f} | {share} |"
        )
    rate = report.rate_tflops
    lines += ["", "## Table 1 on this GPU", ""]
    if rate is None:
        lines.append("No method trained: no rate measured.")
    else:
        lines.append(
            f"Training rate over every timed client-round above (FLOPs counted by `benchmark/flops.py` / wall "
            f"time): **{rate:.2f} TFLOP/s**."
        )
        if report.table1_flops:
            hours = report.table1_flops / (rate * 1e12) / 3600
            hours_text = f"{hours:,.0f}" if hours >= 10 else f"{hours:.2g}"
            lines.append(
                f"Table 1's estimated {report.table1_flops / 1e18:.2f} EFLOP (`fedbench reproduce base2novel "
                f"--dry-run`, `benchmark/sweeps/cost.py`) at that rate: **{hours_text} GPU-hours** on this GPU. "
                "The dry run's GPU-hour line uses this rate from now on."
            )
        lines += ["", rate_comment(rate, report.device_name, report.date)]
    if report.evaluation:
        lines += [
            "",
            "## Evaluation of 8 clients, batched and one by one",
            "",
            "| method | test images | batched | one by one | one by one / batched | largest metric difference |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for w in report.evaluation:
            lines.append(
                f"| {w['name']} | {w['images']} | {w['batched']:.2f} s | {w['sequential']:.2f} s | "
                f"{w['sequential'] / w['batched']:.2f}x | {w['apart']:.2f} |"
            )
    if report.training:
        lines += [
            "",
            "## Training of 8 clients, 2 rounds, batched and one by one",
            "",
            "| method | batched | one by one | one by one / batched | largest metric difference |",
            "|---|---:|---:|---:|---:|",
        ]
        for t in report.training:
            ratio = f"{t['sequential'] / t['batched']:.2f}x" if t["together"] else f"one by one ({t['reason']})"
            lines.append(
                f"| {t['name']} | {t['batched']:.2f} s | {t['sequential']:.2f} s | {ratio} | {t['apart']:.2f} |"
            )
    if report.compiled:
        lines += [
            "",
            "## Compiled blocks (`--compile-blocks true`) against eager, first shape",
            "",
            "| method | eager | compiled blocks | eager / compiled | model steps, eager | model steps, compiled |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for eager, fused in report.compiled:
            lines.append(
                f"| {eager.method} | {eager.total_ms:.0f} ms | {fused.total_ms:.0f} ms | "
                f"{eager.total_ms / fused.total_ms:.2f}x | {eager.model_ms:.0f} ms | {fused.model_ms:.0f} ms |"
            )
    lines += [""] + [f"- {note}" for note in report.notes]
    return "\n".join(lines).rstrip() + "\n"


def environment(device: str) -> tuple[str, str]:
    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}"
    else:
        name = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
        versions = f"torch {torch.__version__}"
    return name, versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "results" / "gpu.md", help="the report (default results/gpu.md)"
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) | cpu (a check of this script only)")
    parser.add_argument("--backbone", default="ViT-B-16", help="open_clip model (default ViT-B-16, random weights)")
    parser.add_argument("--shapes", default=",".join(map(str, SHAPES)), help="classes of each generated dataset")
    parser.add_argument("--methods", default="", help="comma-separated methods (default: every Table 1 method)")
    parser.add_argument("--clients", type=int, default=TABLE1_CLIENTS)
    parser.add_argument("--no-batched", action="store_true", help="skip the batched evaluation and training timings")
    parser.add_argument(
        "--no-compiled", action="store_true", help="skip PromptFL and pFedMMA with compiled blocks (--compile-blocks)"
    )
    args = parser.parse_args(argv)

    import torch

    import methods  # noqa: F401  (registers the methods)
    from benchmark.cli.commands.bench import TABLE1_METHODS
    from benchmark.sweeps.timings import describable_textures

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: no CUDA GPU visible to torch on {platform.node()}; nothing to time.")
        return 0
    names = [m for m in args.methods.split(",") if m] or list(TABLE1_METHODS)
    device_name, versions = environment(args.device)
    shapes = [int(c) for c in args.shapes.split(",")]
    setup = (
        f"{args.backbone} with random weights on {args.device}, `--precision auto`, {args.clients} clients, 16 shots, "
        f"2 local epochs, batch 32, augmentation on (`--augment-backend auto`), generated DTD-layout datasets of "
        f"{', '.join(map(str, shapes))} classes"
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = Report(device_name, versions, now, setup)
    print(f"gpu_check: {device_name}; {versions}")
    scratch = Path(tempfile.mkdtemp(prefix="fedbench-gpu-"))
    for index, classes in enumerate(shapes):
        root = describable_textures(scratch / f"c{classes}", classes=classes, train=16, test=4)
        base = run_base(root, args.device, args.backbone, args.clients)
        for name in names:
            timing = time_method(name, classes, base)
            if index == 0 and timing.trains:
                timing.gpu_share = gpu_share(name, base)
            report.timings.append(timing)
            print(f"  {name} at {classes} classes: {timing.total_ms:.0f} ms per client-round ({timing.precision})")
    if not args.no_batched:
        from benchmark.sweeps.timings import time_batched_evaluation, time_batched_training

        root = scratch / f"c{SHAPES[0]}"
        if not root.exists():
            describable_textures(root, classes=SHAPES[0], train=16, test=4)
        base = dict(run_base(root, args.device, args.backbone), clients=8)
        for key in ("rounds", "local_epochs", "augment", "num_workers", "checkpoint_every", "wandb", "batch_size"):
            base.pop(key)
        runs = [(m, m, {}) for m in ("pfedmma", "promptfl", "lora") if m in names]
        report.evaluation = time_batched_evaluation(base, runs)
        report.training = time_batched_training({**base, "rounds": 2, "batch_size": 32}, runs, repeats=1)
    if not args.no_compiled:
        # round 1 compiles every block at its shapes; round 2, the one timed, runs them
        base = run_base(scratch / f"c{shapes[0]}", args.device, args.backbone, args.clients)
        for name in [m for m in ("promptfl", "pfedmma") if m in names]:
            eager = next(t for t in report.timings if t.method == name and t.classes == shapes[0])
            fused = time_method(name, shapes[0], {**base, "compile_blocks": True})
            report.compiled.append((eager, fused))
            print(
                f"  {name} with compiled blocks: {fused.total_ms:.0f} ms per client-round (eager {eager.total_ms:.0f})"
            )
    report.table1_flops = table1_flops()
    report.notes.append(
        "Model steps include the first step of each kind, which is FLOP-counted and slower; a GPU runs steps "
        "asynchronously, so the per-client-round total is the figure to compare."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(report))
    print(f"gpu_check: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
