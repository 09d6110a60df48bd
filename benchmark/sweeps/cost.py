"""What a preset costs before it runs: an estimate of its FLOPs and of GPU-hours at a stated rate.

Per image and per prompt, the backbone's towers are counted by the suite's FLOP counter
(`benchmark.flops.count_flops`, the architecture with random weights, once per process). A cell's schedule multiplies them:

- training: 3x an image-tower forward (forward + backward) per training image seen
  (rounds x local epochs x participation x the images of a round), plus 3x a text-tower
  forward per class prompt per step (a prompt-learning method encodes every class it
  trains on at every step);
- evaluation: one image-tower forward per test image (the dataset's and every test dataset's)
  per evaluated round.

It is an estimate, not the count `fedbench bench` makes of the real method code: methods that
cache frozen image features or freeze the text tower execute less, personalized methods
that score every client's model execute more evaluation, and elementwise work is not
counted. `docs/running.md` compares it with the counted Table 1 figure. Image counts come
from the data when it is there, else from the releases (`RELEASE_IMAGES`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmark.backbone import load_backbone
from benchmark.evaluation.client_metrics import evaluation_rounds
from benchmark.flops import count_flops
from benchmark.progress import duration
from benchmark.protocol_registry import get_protocol
from benchmark.sweeps import gpu_rate
from benchmark.sweeps.cpu_rate import TOY_TIMINGS, measured_cpu_rate
from benchmark.sweeps.gpu_rate import measured_rate
from data.catalog import dataset_info

# The sustained rate the GPU-hour figure assumes: bf16 training of a ViT-B/16 reaches about a
# third of an A100's 312 TFLOP/s dense peak; a stated round number, to scale by your own.
SUSTAINED_TFLOPS = 100.0

# (train, test) images of each full release, as the suite's loaders read them. CoOp's split
# files (CoOp paper, Table 7; the test counts `benchmark/sweeps/perf.py` uses); CIFAR and
# ImageNet's official splits; for the DomainBed datasets the release's image count (DomainBed
# paper, Table 1), of which the suite's split tests 30 %.
RELEASE_IMAGES: dict[str, tuple[int | None, int]] = {
    "caltech101": (4128, 2465),
    "oxford_pets": (2944, 3669),
    "oxford_flowers": (4093, 2463),
    "food101": (50500, 30300),
    "dtd": (2820, 1692),
    "sun397": (15880, 19850),
    "ucf101": (7639, 3783),
    "stanford_cars": (6509, 8041),
    "fgvc_aircraft": (3334, 3333),
    "eurosat": (13500, 8100),
    "imagenet": (1281167, 50000),
    "imagenet_v2": (None, 10000),
    "imagenet_sketch": (None, 50889),
    "imagenet_a": (None, 7500),
    "imagenet_r": (None, 30000),
    "cifar10": (50000, 10000),
    "cifar100": (50000, 10000),
    **{
        name: (round(0.5 * total), round(0.3 * total))
        for name, total in (
            ("pacs", 9991),
            ("vlcs", 10729),
            ("office_home", 15588),
            ("terra_incognita", 24788),
            ("domainnet_full", 586575),
        )
    },
}
FROZEN_METHODS = {"zeroshot"}  # methods whose runs train nothing: evaluation only


@dataclass(frozen=True)
class TowerFlops:
    image: float  # one image through the image tower, forward
    text: float  # one prompt through the text tower, forward


@functools.cache
def tower_flops(backbone: str) -> TowerFlops:
    """Counted once per backbone architecture and process (random weights; nothing is written:
    a dry run builds nothing in the cache folder)."""
    model = load_backbone(backbone, None)
    image = torch.zeros(1, 3, model.image_size, model.image_size)
    with torch.no_grad():
        _, image_flops = count_flops(model.encode_image, image)
        _, text_flops = count_flops(model.encode_text, model.tokenize(["a photo of a class."]))
    return TowerFlops(float(image_flops), float(text_flops))


@dataclass
class PresetCost:
    flops: float = 0.0
    cells: int = 0
    unknown: list[str] = field(default_factory=list)  # cells whose image counts are not known

    def line(self, rate_tflops: float | None = None, report: Path | None = None) -> str:
        """`rate_tflops` None: the rate `scripts/gpu_check.sh` measured (`report`, default
        results/gpu.md, named), else the assumed `SUSTAINED_TFLOPS` (said to be assumed)."""
        report = gpu_rate.GPU_REPORT if report is None else report
        measured = measured_rate(report) if rate_tflops is None else None
        if measured is not None:
            rate_tflops, at = measured.tflops, f"at {measured.says()}"
        elif rate_tflops is None:
            rate_tflops = SUSTAINED_TFLOPS
            at = (
                f"at a sustained {rate_tflops:g} TFLOP/s (assumed: no rate measured by scripts/gpu_check.sh "
                f"in {report.name} yet)"
            )
        else:
            at = f"at a sustained {rate_tflops:g} TFLOP/s"
        hours = self.flops / (rate_tflops * 1e12) / 3600
        rest = (
            f"; {len(self.unknown)} cells not counted ({', '.join(sorted(set(self.unknown)))}: their image counts "
            "are known only with the data present)"
            if self.unknown
            else ""
        )
        return (
            f"cost estimate for {self.cells} cells: {_flops(self.flops)} (counted image/text tower passes x the "
            f"schedule, `benchmark/sweeps/cost.py`), {_hours(hours)} GPU-hours {at}" + self.cpu_text() + rest
        )

    def cpu_text(self, timings: Path | None = None) -> str:
        """'; on CPU about N core-hours (7m21s on 2 cores) at the toy demo's measured rate (...)',
        or '' when `timings` (default results/toy/timings.md) records no rate."""
        rate = measured_cpu_rate(TOY_TIMINGS if timings is None else timings)
        if rate is None:
            return ""
        core_hours = rate.hours(self.flops)
        return (
            f"; on CPU about {_hours(core_hours)} core-hours ({duration(core_hours * 3600 / rate.cores)} on "
            f"{rate.cores} cores) at {rate.says()}"
        )


def _hours(hours: float) -> str:
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:.1f}" if hours >= 0.1 else f"{hours:.2g}"


def _flops(value: float) -> str:
    for scale, name in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")):
        if value >= scale:
            return f"{value / scale:,.1f} {name}"
    return f"{value:,.0f} FLOP"


def _images(name: str, counts: dict[str, tuple[int, int]]) -> tuple[int | None, int | None]:
    """(train, test) images of `name`: the data's when loaded, else the release's (the toy
    world's from its definition)."""
    if name in counts:
        return counts[name]
    if name in RELEASE_IMAGES:
        return RELEASE_IMAGES[name]
    try:  # a generated dataset: its size is part of its definition
        from data.toy import world  # lazy: only generated datasets need it, and the toy world may change shape

        spec = world.toy_specs()[name]
        cells = len(spec.classes) * max(1, len(spec.domains))
        return spec.train_per_class * cells, spec.test_per_class * cells
    except Exception:  # not a toy dataset, or a toy world without these fields: not known
        return None, None


def _training_pool(name: str, config, counts: dict[str, tuple[int, int]]) -> tuple[float, int] | None:
    """(images of one round at full participation, classes trained on) for dataset `name`."""
    info = dataset_info(name)
    # The share of the dataset the protocol trains on: the base half, the source domains...
    trained_classes, domains = get_protocol(config.protocol).trained_share(info.num_classes or 0, len(info.domains))
    if config.shots:
        return config.shots * trained_classes * domains, trained_classes
    train_images, _ = _images(name, counts)
    return (train_images, trained_classes) if train_images is not None else None


def cell_flops(config, towers: TowerFlops, counts: dict[str, tuple[int, int]], trains: bool) -> float | None:
    """The estimated FLOPs of one cell (module docstring); None when an image count is unknown."""
    total = 0.0
    evaluations = 1
    if trains:
        pools = [_training_pool(name, config, counts) for name in config.datasets]
        if any(p is None for p in pools):
            return None
        seen = config.rounds * config.local_epochs * config.participation * sum(p[0] for p in pools)
        steps = seen / max(1, config.batch_size)
        trained_classes = max(p[1] for p in pools)
        total += 3 * towers.image * seen + 3 * towers.text * steps * trained_classes
        evaluations = len(evaluation_rounds(config.rounds, config.eval_every))
    for name in dict.fromkeys(config.datasets + config.test_datasets):
        _, test = _images(name, counts)
        if test is None:
            return None
        total += evaluations * towers.image * test
    return total


def preset_cost(cells, counts: dict[str, tuple[int, int]] | None = None) -> PresetCost:
    """The estimate of `cells` (those of a plan still to run, or all of a preset)."""
    cost = PresetCost()
    towers: dict[str, TowerFlops] = {}
    for cell in cells:
        config = cell.config
        backbone = towers.setdefault(config.backbone, tower_flops(config.backbone))
        flops = cell_flops(config, backbone, counts or {}, trains=config.method not in FROZEN_METHODS)
        cost.cells += 1
        if flops is None:
            cost.unknown.append(config.datasets[0])
        else:
            cost.flops += flops
    return cost


def data_counts(plan_checks) -> dict[str, tuple[int, int]]:
    """(train, test) images of the datasets a plan loaded (its `DataCheck`s)."""
    return {name: (c.num_train, c.num_test) for (name, _), c in plan_checks.items() if c.num_test}
