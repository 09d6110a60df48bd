"""Times every Table 1 method on ViT-B/16 (random weights: the real architecture, no download)
on a CUDA GPU on Table 1's workload and writes `results/gpu.md` (what `scripts/gpu_check.sh` runs).

Per method and shape: one federation of 10 clients on a generated DTD-layout dataset of
real-size images (`--image-side`, default 470 px as DTD's), with Table 1's class dealing,
16 shots, 2 local epochs, batch 32, augmentation on, `--precision auto` (each method's
gpu_precision). Round 1 warms up (cuDNN autotuning, the allocator, first optimizers, device
caches, compiled graphs); round 2 is timed. The default shape is DTD's 47 classes; `--shapes
47,100,397` adds Table 1's range of client sizes (Caltech101-sized, SUN397), whose base halves
dealt to 10 clients give about 38, 80 and 318 training images per client.

On CUDA the timed round is measured with CUDA events on the GPU's timeline, not host timers
(a host timer charges the GPU's backlog of earlier steps to whatever the host waits in next):
the client-round is the round's events over its client-rounds, "data loading" the GPU-timeline
time between the events around each batch's fetch (its kernels and the GPU's idling on the
host), "model steps" the rest. On the CPU (`--device cpu`, a check of this script) the host
timers of the run stand in. Each method runs eager (the default path of base2novel.yaml),
then with compiled blocks and, where it can (`batched_training`), with a round's clients
batched, side by side. "GPU share" is the GPU's kernel time over the wall time of a
client-round (torch.profiler, in a separate run of PromptFL and pFedMMA, so that profiling
slows no timed figure).

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
DEFAULT_SHAPES = SHAPES[:1]  # DTD: within scripts/gpu_check.sh's 8 minutes
TABLE1_CLIENTS = 10
IMAGE_SIDE = 470  # px: DTD's images are ~300-640 px on a side


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
    timer: str = "host"  # "CUDA events" where the round was timed on the GPU's timeline


@dataclass
class Report:
    device_name: str
    versions: str
    date: str
    setup: str  # what was timed, in words
    timings: list[MethodTiming] = field(default_factory=list)
    evaluation: list[dict] = field(default_factory=list)
    training: list[dict] = field(default_factory=list)
    compiled: list[tuple[MethodTiming, MethodTiming, MethodTiming | None]] = field(default_factory=list)
    # (eager, compiled blocks, batched clients or None where the method has no batched training)
    table1_flops: float | None = None  # the dry run's estimate of Table 1 (benchmark/sweeps/cost.py)
    method_flops: dict[str, float] = field(default_factory=dict)  # the same, per method
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
        eval_every=2,  # the last round only: the timed round is not followed by an extra evaluation
        wandb="disabled",
        seed=1,
        checkpoint_every=0,
    )


def time_method(name: str, classes: int, base: dict) -> MethodTiming:
    """One federation of `name` on `base`; its last round timed (CUDA events on a GPU)."""
    import torch

    from benchmark.config import build_config
    from benchmark.runs.reporting import split_time
    from benchmark.runs.runner import run_experiment

    config = build_config({**base, "method": name})
    cuda = str(base["device"]).startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
    with EventTimer(enabled=cuda, timed_round=1) as events:
        result = run_experiment(config, write=False, progress=False)
    timed = result.federation.rounds[1:] or result.federation.rounds
    client_rounds = sum(len(r.clients) for r in timed)
    images = images_per_client(classes, config.shots, config.clients)
    timing = MethodTiming(name, classes, str(result.summary["precision"]), images)
    if not client_rounds:
        timing.trains = False
        return timing
    split = split_time(timed)
    if events.measured:
        timing.timer = "CUDA events"
        timing.total_ms = 1000 * events.round_seconds / client_rounds
        timing.data_ms = 1000 * events.data_seconds / client_rounds
        timing.model_ms = 1000 * split.model / client_rounds  # host: the time to launch the steps
        timing.rest_ms = timing.total_ms - timing.data_ms - min(timing.model_ms, timing.total_ms - timing.data_ms)
        seconds = events.round_seconds
    else:
        timing.total_ms = 1000 * split.total / client_rounds
        timing.model_ms = 1000 * split.model / client_rounds
        timing.data_ms = 1000 * split.data / client_rounds
        timing.rest_ms = timing.total_ms - timing.model_ms - timing.data_ms
        seconds = sum(r.total_seconds for r in timed)
    timing.train_flops = float(sum(r.train_flops for r in timed))
    timing.seconds = seconds
    timing.tflops = timing.train_flops / timing.seconds / 1e12 if timing.train_flops else float("nan")
    return timing


class EventTimer:
    """CUDA events around round `timed_round`'s training (`FederatedSimulator.train_round`) and
    around each batch fetched in it (`ClientLoop.fit`'s batches): seconds on the GPU's timeline,
    read once after the run (recording an event does not wait for the GPU). Disabled: nothing."""

    def __init__(self, enabled: bool, timed_round: int) -> None:
        self.enabled, self.timed_round = enabled, timed_round
        self.round_seconds = self.data_seconds = 0.0
        self.measured = False
        self._round: list = []
        self._data: list = []
        self._timing = False

    def __enter__(self) -> "EventTimer":
        if not self.enabled:
            return self
        from benchmark.federation.client_loop import ClientLoop
        from benchmark.federation.simulator import FederatedSimulator

        timer, train_round, fit = self, FederatedSimulator.train_round, ClientLoop.fit
        self._restore = (FederatedSimulator, train_round, ClientLoop, fit)

        def timed_round(simulator, sampled, round_index, *args, **kwargs):
            if round_index != timer.timed_round:
                return train_round(simulator, sampled, round_index, *args, **kwargs)
            start, end = timer._event(), timer._event()
            timer._timing = True
            start.record()
            try:
                return train_round(simulator, sampled, round_index, *args, **kwargs)
            finally:
                end.record()
                timer._timing = False
                timer._round.append((start, end))

        def timed_fit(loop, module, batches, *args, **kwargs):
            return fit(loop, module, _TimedBatches(batches, timer) if timer._timing else batches, *args, **kwargs)

        FederatedSimulator.train_round, ClientLoop.fit = timed_round, timed_fit
        return self

    def __exit__(self, *exc) -> None:
        if not self.enabled:
            return
        import torch

        simulator, train_round, loop, fit = self._restore
        simulator.train_round, loop.fit = train_round, fit
        torch.cuda.synchronize()
        self.round_seconds = sum(s.elapsed_time(e) for s, e in self._round) / 1000
        self.data_seconds = sum(s.elapsed_time(e) for s, e in self._data) / 1000
        self.measured = bool(self._round)

    @staticmethod
    def _event():
        import torch

        return torch.cuda.Event(enable_timing=True)


class _TimedBatches:
    """A client-round's batches, each fetch between two CUDA events (`EventTimer`)."""

    def __init__(self, batches, timer: EventTimer) -> None:
        self._batches, self._timer = batches, timer
        self.sampler = getattr(batches, "sampler", None)

    def __len__(self) -> int:
        return len(self._batches)

    def __iter__(self):
        iterator = iter(self._batches)
        while True:
            start, end = self._timer._event(), self._timer._event()
            start.record()
            batch = next(iterator, None)
            end.record()
            self._timer._data.append((start, end))
            if batch is None:
                return
            yield batch


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


def table1_flops() -> tuple[float | None, dict[str, float]]:
    """The dry run's estimate of Table 1 (`fedbench reproduce base2novel --dry-run`'s cost
    line), in all and per method."""
    from benchmark.sweeps.cost import preset_cost
    from benchmark.sweeps.presets import load_preset

    try:
        cells = list(load_preset("base2novel").cells())
        cost = preset_cost(cells)
        per_method = {}
        for method in dict.fromkeys(cell.config.method for cell in cells):
            part = preset_cost([cell for cell in cells if cell.config.method == method])
            if not part.unknown:
                per_method[method] = part.flops
    except Exception as exc:  # the report is still worth writing without the estimate
        print(f"gpu_check: no Table 1 estimate ({exc.__class__.__name__}: {exc})", file=sys.stderr)
        return None, {}
    return (cost.flops if not cost.unknown else None), per_method


def render(report: Report) -> str:
    lines = [
        "# GPU timings",
        "",
        f"Written by `bash scripts/gpu_check.sh` on {report.date}: {report.device_name}; {report.versions}.",
        f"Every figure below comes from that one run. {report.setup}; round 1 warms up, round 2 is timed "
        f"({_timers(report)}).",
        "",
        "## A client-round of every Table 1 method",
        "",
        "| method | classes | images per client | precision | per client-round | model steps | data loading "
        "| framework + configure_optimizers | training TFLOP/s | GPU share |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += _client_round_rows(report)
    lines += _rate_section(report)
    lines += _evaluation_section(report)
    lines += _training_section(report)
    lines += _compiled_section(report)
    lines += _projection_section(report)
    lines += [""] + [f"- {note}" for note in report.notes]
    return "\n".join(lines).rstrip() + "\n"


def _client_round_rows(report: Report) -> list[str]:
    """The rows of the client-round table: one per method and shape."""
    lines = []
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
    return lines


def _rate_section(report: Report) -> list[str]:
    """The training rate over the timed client-rounds, and Table 1's GPU-hours at it."""
    from benchmark.sweeps.gpu_rate import rate_comment

    rate = report.rate_tflops
    lines = ["", "## Table 1 on this GPU", ""]
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
    return lines


def _evaluation_section(report: Report) -> list[str]:
    """Batched evaluation against one client at a time."""
    if not report.evaluation:
        return []
    lines = [
        "",
        f"## Evaluation of {report.evaluation[0]['clients']} clients, batched and one by one",
        "",
        "| method | test images | batched | one by one | one by one / batched | largest metric difference |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for w in report.evaluation:
        lines.append(
            f"| {w['name']} | {w['images']} | {w['batched']:.2f} s | {w['sequential']:.2f} s | "
            f"{w['sequential'] / w['batched']:.2f}x | {w['apart']:.2f} |"
        )
    return lines


def _training_section(report: Report) -> list[str]:
    """Batched training against one client at a time."""
    if not report.training:
        return []
    lines = [
        "",
        "## Training of a round's clients, 2 rounds, batched and one by one",
        "",
        "| method | batched | one by one | one by one / batched | largest metric difference |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in report.training:
        ratio = f"{t['sequential'] / t['batched']:.2f}x" if t["together"] else f"one by one ({t['reason']})"
        lines.append(f"| {t['name']} | {t['batched']:.2f} s | {t['sequential']:.2f} s | {ratio} | {t['apart']:.2f} |")
    return lines


def _compiled_section(report: Report) -> list[str]:
    """Eager, compiled blocks and batched clients at the first shape."""
    if not report.compiled:
        return []
    lines = [
        "",
        "## Eager (the default path), compiled blocks (`--compile-blocks true`) and batched clients "
        "(`--batched-training true`), first shape",
        "",
        "| method | eager | compiled blocks | eager / compiled | batched clients | model steps, eager "
        "| model steps, compiled | data loading, eager |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for eager, fused, together in report.compiled:
        batched = f"{together.total_ms:.0f} ms" if together is not None else "– (no batched training)"
        lines.append(
            f"| {eager.method} | {eager.total_ms:.0f} ms | {fused.total_ms:.0f} ms | "
            f"{eager.total_ms / fused.total_ms:.2f}x | {batched} | {eager.model_ms:.0f} ms | "
            f"{fused.model_ms:.0f} ms | {eager.data_ms:.0f} ms ({100 * eager.data_ms / eager.total_ms:.0f} %) |"
        )
    return lines


def _projection_section(report: Report) -> list[str]:
    """Table 1's GPU-hours per method, projected from the rate at the first shape."""
    if not report.method_flops:
        return []
    lines = [
        "",
        "## Table 1 per method, projected from this GPU's rate at the first shape",
        "",
        "GPU-hours on this GPU (H200-hours where it is an H200): the method's share of the dry run's "
        "estimate over its rate (training FLOPs / time of its timed client-rounds) on the default path, "
        "the fastest path timed above, and the precision it ran in.",
        "",
        "| method | precision | Table 1 FLOPs | rate, eager | GPU-hours, eager | GPU-hours, fastest path |",
        "|---|---|---:|---:|---:|---:|",
    ]
    first = report.timings[0].classes if report.timings else None
    faster = {
        e.method: min((t for t in (e, f, b) if t is not None), key=lambda t: t.total_ms) for e, f, b in report.compiled
    }
    total = {"eager": 0.0, "fastest": 0.0}
    for t in report.timings:
        if t.classes != first or not t.trains or t.method not in report.method_flops:
            continue
        flops = report.method_flops[t.method]
        best = faster.get(t.method, t)
        eager_hours = flops / (t.train_flops / t.seconds) / 3600 if t.train_flops else float("nan")
        best_hours = eager_hours * best.total_ms / t.total_ms
        total["eager"] += eager_hours
        total["fastest"] += best_hours
        lines.append(
            f"| {t.method} | {t.precision} | {flops / 1e15:,.0f} PFLOP | {t.tflops:.1f} TFLOP/s | "
            f"{eager_hours:.2f} | {best_hours:.2f} |"
        )
    lines.append(f"| all | | | | **{total['eager']:.2f}** | **{total['fastest']:.2f}** |")
    return lines


def _timers(report: Report) -> str:
    kinds = {t.timer for t in report.timings if t.trains}
    if kinds == {"CUDA events"}:
        return "CUDA events on the GPU's timeline"
    return "host timers" if kinds <= {"host"} else "CUDA events and host timers"


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
    args = _parser().parse_args(argv)

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
        f"2 local epochs, batch 32, Table 1's class dealing, augmentation on (`--augment-backend auto`), generated "
        f"DTD-layout datasets of {args.image_side} px images and {', '.join(map(str, shapes))} classes"
    )
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report = Report(device_name, versions, now, setup)
    print(f"gpu_check: {device_name}; {versions}")
    scratch = Path(tempfile.mkdtemp(prefix="fedbench-gpu-"))
    for index, classes in enumerate(shapes):
        root = describable_textures(scratch / f"c{classes}", classes=classes, train=16, test=4, side=args.image_side)
        base = run_base(root, args.device, args.backbone, args.clients)
        for name in names:
            timing = time_method(name, classes, base)
            if index == 0 and timing.trains and name in ("promptfl", "pfedmma"):
                timing.gpu_share = gpu_share(name, base)
            report.timings.append(timing)
            print(f"  {name} at {classes} classes: {timing.total_ms:.0f} ms per client-round ({timing.precision})")
    if not args.no_batched:
        _time_batched(args, report, scratch, names)
    if not args.no_compiled:
        _time_compiled(args, report, scratch, shapes)
    report.table1_flops, report.method_flops = table1_flops()
    report.notes.append(
        "Model steps include the first step of each kind, which is FLOP-counted and slower; a GPU runs steps "
        "asynchronously, so the per-client-round total is the figure to compare."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(report))
    print(f"gpu_check: wrote {args.out}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "results" / "gpu.md", help="the report (default results/gpu.md)"
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) | cpu (a check of this script only)")
    parser.add_argument("--backbone", default="ViT-B-16", help="open_clip model (default ViT-B-16, random weights)")
    parser.add_argument(
        "--shapes",
        default=",".join(map(str, DEFAULT_SHAPES)),
        help=f"classes of each generated dataset (default DTD's {DEFAULT_SHAPES[0]}; Table 1's range: 47,100,397)",
    )
    parser.add_argument("--image-side", type=int, default=IMAGE_SIDE, help="side of the generated images in px")
    parser.add_argument("--methods", default="", help="comma-separated methods (default: every Table 1 method)")
    parser.add_argument("--clients", type=int, default=TABLE1_CLIENTS)
    parser.add_argument("--no-batched", action="store_true", help="skip the batched evaluation and training sections")
    parser.add_argument(
        "--no-compiled",
        action="store_true",
        help="skip the methods with compiled blocks (--compile-blocks) and with batched clients (--batched-training)",
    )
    return parser


def _time_batched(args, report: Report, scratch: Path, names: list[str]) -> None:
    """Batched evaluation and training against one client at a time, at Table 1's first shape."""
    from benchmark.sweeps.timings import describable_textures, time_batched_evaluation, time_batched_training

    root = scratch / f"c{SHAPES[0]}"
    if not root.exists():
        describable_textures(root, classes=SHAPES[0], train=16, test=4, side=args.image_side)
    base = run_base(root, args.device, args.backbone, args.clients)  # Table 1's clients, augmentation on
    for key in ("rounds", "local_epochs", "num_workers", "checkpoint_every", "wandb", "batch_size", "eval_every"):
        base.pop(key)
    runs = [(m, m, {}) for m in ("pfedmma", "promptfl", "lora") if m in names]
    report.evaluation = time_batched_evaluation(base, runs)
    report.training = time_batched_training({**base, "rounds": 2, "batch_size": 32}, runs, repeats=1)


def _time_compiled(args, report: Report, scratch: Path, shapes: list[int]) -> None:
    """Every method that trains, at the first shape, with compiled blocks and with batched clients."""
    from benchmark.registry import get_method

    # round 1 compiles every block at its shapes; round 2, the one timed, runs them
    base = run_base(scratch / f"c{shapes[0]}", args.device, args.backbone, args.clients)
    for eager in [t for t in report.timings if t.classes == shapes[0] and t.trains]:
        name = eager.method
        fused = time_method(name, shapes[0], {**base, "compile_blocks": True})
        together = None
        if get_method(name).batched_training:  # the probe may still refuse: the run then warns why
            together = time_method(name, shapes[0], {**base, "batched_training": True})
        report.compiled.append((eager, fused, together))
        print(
            f"  {name}: eager {eager.total_ms:.0f} ms, compiled blocks {fused.total_ms:.0f} ms"
            + (f", batched clients {together.total_ms:.0f} ms" if together else "")
            + " per client-round"
        )


if __name__ == "__main__":
    sys.exit(main())
