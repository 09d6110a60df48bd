"""What a table's schedule costs in FLOPs: executed by this code against the exact minimum.

Per-unit costs are counted (`benchmark.flops`) on the real method code -- its
`training_step` and backward, `encode_classes`, and the evaluator's `accuracy` with a
fresh and a filled feature cache -- over the table's backbone architecture with random
weights (the FLOPs of a forward or backward pass do not depend on the weights), on
synthetic 1- and 2-image batches and 1- and 2-class label spaces, with the shortcuts
of `benchmark.shortcuts` on (what runs by default) or off (the plain path). A training
step's cost is bilinear in images b and classes C (a + b x image + C x class text +
b C x logits); the fit through the four counted corners is exact for every method here.

The schedule (preset base2novel's, `Schedule.paper`) then multiplies them out as the code
runs it (`executed`): the protocol's own partition of each dataset's classes (its base
classes dealt to the clients as the preset's `class_dealing` says), every client trains
every round (participation 1), each step classifies over all base classes (the
authors' protocol), once-per-client-round work (a download's frozen inputs) is paid per
client-round and caches keyed by the class list once per run; evaluation at the rounds
`evaluation_rounds` picks, each client state encoding its base and novel classes once
and scoring Local, Base and Novel as three memoized calls. A round-2 client's state is the
server's download (`benchmark.federation.servers.FedAvgServer`), and whether every client
is scored with one state is the server's rule too.

The exact minimum (`minimum`) is the same per-unit costs with every exact elimination
applied: the shortcuts on (text to the batch's longest real prompt, frozen prefixes and
per-round inputs once), clients with equal states scored once, and Local read from the
Base predictions it is a subset of (same model, same images, same classes), which the
code scores again.

Synthetic class names are one word each ("a photo of a class0007." is 9 tokens), so
the text of a batch is as short as real prompts are at their shortest; the real
datasets' longest prompts are longer, so this understates the text tower's share a
little for both executed and minimum alike.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Sequence

import torch

from benchmark import flops, shortcuts
from benchmark.backbone import load_backbone
from benchmark.config import RunConfig, build_config
from benchmark.evaluation.accuracy import accuracy
from benchmark.evaluation.client_metrics import evaluation_rounds
from benchmark.federation.features import FeatureCache
from benchmark.federation.servers.fedavg import FedAvgServer
from benchmark.method import ClientContext, FederatedMethod
from benchmark.protocol_registry import get_protocol
from benchmark.registry import build_method
from benchmark.sweeps.presets import load_preset
from data.base import DatasetSplits, LabeledImages
from data.catalog import dataset_info
from data.partition import Partition

PAPER_PRESET = "base2novel"  # the paper's Table 1, whose schedule `fedbench bench` and `fedbench profile` cost
# The test-split sizes of the CoOp split files the Table 1 datasets use.
COOP_TEST_IMAGES = {
    "caltech101": 2465,
    "oxford_pets": 3669,
    "oxford_flowers": 2463,
    "food101": 30300,
    "dtd": 1692,
    "sun397": 19850,
    "ucf101": 3783,
}


@dataclass(frozen=True)
class Schedule:
    """A base-to-novel schedule to cost: a run config (its protocol with the protocol's options
    resolved, rounds, local epochs, clients, shots, batch size, evaluated rounds) over
    `datasets`, `seeds` seeds each, participation 1."""

    config: RunConfig
    datasets: tuple[str, ...]
    seeds: int

    @classmethod
    def paper(cls, datasets: Sequence[str] = (), seeds: int = 0, **run) -> "Schedule":
        """Preset base2novel's schedule: its run settings (`run` overrides them), its datasets
        and as many seeds as it runs (unless `datasets`, `seeds` say otherwise)."""
        preset = load_preset(PAPER_PRESET)
        names = tuple(datasets) or tuple(d["name"] for d in preset.datasets)
        return cls(build_config(preset.run, run), names, seeds or len(preset.seeds))

    rounds = property(lambda self: self.config.rounds)
    local_epochs = property(lambda self: self.config.local_epochs)
    clients = property(lambda self: self.config.clients)
    shots = property(lambda self: self.config.shots)
    batch_size = property(lambda self: self.config.batch_size)
    eval_every = property(lambda self: self.config.eval_every)  # 0 = about five evaluated rounds

    def partition(self, dataset: str) -> Partition:
        """The protocol's partition of `dataset`'s classes, as a run makes it from a training
        split holding `shots` images of each class (the few-shot sample of a larger one)."""
        shots = self.config.shots
        names = [f"class{c}" for c in range(dataset_info(dataset).num_classes)]
        split = _SyntheticImages(f"perf-partition-{dataset}", names, shots, 1)
        return get_protocol(self.config.protocol).partition(DatasetSplits(dataset, split, split, names), self.config)

    def describe(self) -> str:
        return (
            f"{len(self.datasets)} datasets x {self.seeds} seeds, {self.clients} clients, {self.rounds} rounds x "
            f"{self.local_epochs} local epochs, {self.shots} shots, batch {self.batch_size}, participation 1"
        )


@dataclass
class UnitCosts:
    """FLOPs of one method's units, counted on the real code (module docstring)."""

    step: tuple[float, float, float, float]  # a training step: a + b*x + C*y + b*C*z
    per_client_round: tuple[float, float]  # extra at a client-round's first step: e0 + C*e1
    per_run: tuple[float, float]  # extra at the first step with a class list: p0 + C*p1
    text_cold: tuple[float, float]  # encode_classes of C classes the first time: t0 + C*t1
    text_warm: tuple[float, float]  # ... again (frozen text is cached)
    scoring: tuple[float, float, float, float]  # a client scoring b images over C classes, caches filled
    shared_per_image: float  # per test image, once for all clients (frozen features, image prefix)
    trains: bool
    shared_state: bool  # every client is evaluated with the same state


def _bilinear(v11: float, v21: float, v12: float, v22: float) -> tuple[float, float, float, float]:
    """(a, x, y, z) with v(b, C) = a + b x + C y + b C z through the four corners b, C in {1, 2}."""
    z = v22 - v21 - v12 + v11
    x = v21 - v11 - z
    y = v12 - v11 - z
    a = v11 - x - y - z
    return a, x, y, z


def _linear(v1: float, v2: float) -> tuple[float, float]:
    return v1 - (v2 - v1), v2 - v1


def _at(coefficients: Sequence[float], b: float, c: float) -> float:
    a, x, y, z = coefficients
    return a + b * x + c * y + b * c * z


def _line(coefficients: Sequence[float], c: float) -> float:
    return coefficients[0] + c * coefficients[1]


class _SyntheticImages:
    """A test split of random images: b per class, for the evaluator's `accuracy`."""

    def __new__(cls, name: str, class_names: Sequence[str], per_class: int, size: int):

        class Images(LabeledImages):
            def load(self, index: int) -> torch.Tensor:
                generator = torch.Generator().manual_seed(index)
                return torch.rand(3, size, size, generator=generator)

        labels = [c for c in range(len(class_names)) for _ in range(per_class)]
        return Images(name, labels, class_names, cache_key=name)


_NAMES = iter(range(10**9))


def _names(count: int) -> list[str]:
    """Class names never used before (so no cache of an earlier count holds them)."""
    return [f"class{next(_NAMES):04d}" for _ in range(count)]


def _fresh_download(method: FederatedMethod, clients: int, step: int) -> None:
    """Put `method` in the state of a client in round 2 or later: the server's download of
    an aggregate and a bank of `clients` uploads (distinct values each call, so caches of
    frozen per-round inputs are cold)."""
    upload = method.uploaded_state()
    if not upload:
        return
    generator = torch.Generator().manual_seed(step)

    def jitter(state):
        return {
            k: v + 0.01 * torch.randn(v.shape, generator=generator).to(v) if v.is_floating_point() else v
            for k, v in state.items()
        }

    bank = {cid: jitter(upload) for cid in range(clients)}
    server = FedAvgServer(method, ())  # holding an aggregate and a bank, as after round 1
    server.restore(jitter(upload), bank, {})
    method.load_client_state(server.download(0, 1))


def measure(method: FederatedMethod, clients: int = 10) -> UnitCosts:
    """The unit costs of `method` under the current shortcut setting (`shortcuts.use`)."""

    size = method.backbone.image_size
    device = method.device
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, size, size, generator=generator).to(device)
    counter = iter(range(10**6))
    trains = method.trains
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log outside a Trainer
        steady, round_extra, run_extra = _training_costs(method, images, clients, counter) if trains else ({}, [], [])
        text_cold, text_warm, scoring, shared = _evaluation_costs(method, size, counter)
    a, x, y, z = _bilinear(scoring[(1, 1)], scoring[(2, 1)], scoring[(1, 2)], scoring[(2, 2)])
    shared_state = FedAvgServer.scores_one_state(method)
    return UnitCosts(
        step=_bilinear(steady[(1, 1)], steady[(2, 1)], steady[(1, 2)], steady[(2, 2)]) if trains else (0, 0, 0, 0),
        per_client_round=_linear(*round_extra) if trains else (0, 0),
        per_run=_linear(*run_extra) if trains else (0, 0),
        text_cold=_linear(*text_cold),
        text_warm=_linear(*text_warm),
        scoring=(a, x, y, z),
        shared_per_image=shared,
        trains=trains,
        shared_state=shared_state,
    )


def _training_costs(method: FederatedMethod, images, clients: int, counter) -> tuple[dict, list, list]:
    """FLOPs of training steps: steady steps per (batch, classes), and what the first step of a
    client-round and of a run add (cold caches) for 1 and 2 classes."""
    device = method.device
    steady: dict[tuple[int, int], float] = {}
    round_extra, run_extra = [], []
    for classes in (1, 2):
        names = tuple(_names(classes))
        method.train()
        method.set_client(ClientContext(0, 2, names, 16 * classes, 50))
        labels = torch.arange(2, device=device) % classes

        def step(b: int) -> float:
            method.zero_grad(set_to_none=True)
            _, counted = flops.count_flops(lambda: method.training_step((images[:b], labels[:b]), 0).backward())
            return counted

        # Cold steps on one image (what they add does not depend on the batch).
        _fresh_download(method, clients, next(counter))
        cold_all = step(1)
        steady[(1, classes)] = step(1)
        steady[(2, classes)] = step(2)
        _fresh_download(method, clients, next(counter))
        cold_round = step(1)
        round_extra.append(cold_round - steady[(1, classes)])
        run_extra.append(cold_all - cold_round)
        method.set_client(None)
        method.zero_grad(set_to_none=True)
    return steady, round_extra, run_extra


def _evaluation_costs(method: FederatedMethod, size: int, counter) -> tuple[list, list, dict, float]:
    """FLOPs of evaluation: the class features cold and warm for 1 and 2 classes, the scoring
    per (batch, classes) with the text side taken out, and the shared work per image."""
    method.eval()
    text_cold, text_warm, scoring = [], [], {}
    with torch.no_grad():
        names = _names(2)
        for classes in (1, 2):
            text_cold.append(flops.count_flops(method.encode_classes, names[:classes])[1])
            text_warm.append(flops.count_flops(method.encode_classes, names[:classes])[1])
        # Images 0 and 1 are of class 0; scored over class 0 alone (C = 1) or both (C = 2).
        split = _SyntheticImages(f"perf-{next(counter)}", names, 2, size)
        # Batches of one: a FLOP count per image (a run's cache pads its batches to 64 rows).
        cache = FeatureCache(batch_size=1, progress=False)
        cold = flops.count_flops(accuracy, method, split, [0, 1], [0], cache)[1]  # fills the cache
        for classes in (1, 2):
            for b in (1, 2):
                warm = flops.count_flops(accuracy, method, split, list(range(b)), list(range(classes)), cache)[1]
                scoring[(b, classes)] = warm - text_warm[classes - 1]
        shared = (cold - scoring[(2, 1)] - text_warm[0]) / 2
    return text_cold, text_warm, scoring, shared


@dataclass
class Cost:
    """FLOPs of a schedule by source."""

    parts: dict[str, float] = field(default_factory=dict)

    def add(self, source: str, value: float) -> None:
        self.parts[source] = self.parts.get(source, 0.0) + float(value)

    @property
    def total(self) -> float:
        return sum(self.parts.values())


SOURCES = (
    ("train_image", "training: per image (image tower, forward and backward)"),
    ("train_text", "training: per class (text tower over the class prompts)"),
    ("train_other", "training: per step and per image x class (logits, transport, gates)"),
    ("train_once", "training: once per client-round or per class list (frozen inputs, caches)"),
    ("eval_text", "evaluation: class prompts"),
    ("eval_images", "evaluation: images scored by each client's model"),
    ("eval_shared", "evaluation: frozen image work shared by all clients"),
)


def schedule_cost(units: UnitCosts, schedule: Schedule, minimum: bool) -> Cost:
    """The FLOPs of `schedule` for one method: as the code runs it, or (`minimum`) with
    equal-state clients scored once and Local read from Base (module docstring)."""

    cost = Cost()
    for name in schedule.datasets:
        partition = schedule.partition(name)
        base, novel = len(partition.base_class_ids), len(partition.novel_class_ids)
        classes = base + novel
        test = COOP_TEST_IMAGES[name]
        base_test, novel_test = test * base / classes, test * novel / classes
        seeds = schedule.seeds
        if units.trains:
            for client in partition.clients:
                n = len(client.train_indices)
                full, rest = divmod(n, schedule.batch_size)
                batches = [schedule.batch_size] * full + ([rest] if rest else [])
                steps = len(batches) * schedule.local_epochs
                images = n * schedule.local_epochs
                a, x, y, z = units.step
                client_rounds = schedule.rounds * seeds
                cost.add("train_image", client_rounds * images * x)
                cost.add("train_text", client_rounds * steps * base * y)
                cost.add("train_other", client_rounds * (steps * a + images * base * z))
                cost.add("train_once", client_rounds * _line(units.per_client_round, base))
            cost.add("train_once", seeds * _line(units.per_run, base))
        rounds = sorted(evaluation_rounds(schedule.rounds, schedule.eval_every)) if units.trains else [schedule.rounds]
        states = 1 if units.shared_state else schedule.clients
        text_base_cold, text_novel_cold = _line(units.text_cold, base), _line(units.text_cold, novel)
        text_base_warm, text_novel_warm = _line(units.text_warm, base), _line(units.text_warm, novel)
        for index, _ in enumerate(rounds):
            # The first time a class list is encoded it costs text_cold; frozen text is cached after.
            first = index == 0
            tb = text_base_cold if first else text_base_warm
            tn = text_novel_cold if first else text_novel_warm
            if minimum:
                cost.add("eval_text", seeds * states * (tb + tn))
                cost.add(
                    "eval_images",
                    seeds * states * (_at(units.scoring, base_test, base) + _at(units.scoring, novel_test, novel)),
                )
            else:
                # Each state encodes the base and the novel classes once (Local shares Base's);
                # Base and Novel are scored once per distinct state, Local once per client.
                cost.add("eval_text", seeds * states * (tb + tn))
                cost.add(
                    "eval_images",
                    seeds * states * (_at(units.scoring, base_test, base) + _at(units.scoring, novel_test, novel)),
                )
                for client in partition.clients:
                    local = test * len(client.class_ids) / classes
                    cost.add("eval_images", seeds * _at(units.scoring, local, base))
        cost.add("eval_shared", seeds * test * units.shared_per_image)
    return cost


@dataclass
class MethodReport:
    method: str
    executed: Cost
    minimum: Cost
    plain: Cost


def table_costs(
    methods: Sequence[tuple[str, dict]], backbone_name: str, schedule: Schedule, progress: bool = False
) -> list[MethodReport]:
    """Executed (shortcuts on), plain (off) and minimum FLOPs of `schedule` per method, on
    `backbone_name` with random weights."""

    backbone = load_backbone(backbone_name, None)
    reports = []
    for label, args in methods:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            method = build_method(args.get("method", label), backbone, args.get("method_args", {}))
        costs = {}
        for on in (True, False):
            if progress:
                print(f"  counting {label} ({'shortcuts on' if on else 'plain path'}) ...", flush=True)
            with shortcuts.use(on):
                costs[on] = measure(method, schedule.clients)
        reports.append(
            MethodReport(
                label,
                executed=schedule_cost(costs[True], schedule, minimum=False),
                minimum=schedule_cost(costs[True], schedule, minimum=True),
                plain=schedule_cost(costs[False], schedule, minimum=False),
            )
        )
    return reports


def flop_unit(reports: Sequence[MethodReport]) -> tuple[float, str]:
    """The unit the largest total reads best in: (scale, name)."""
    largest = max((r.plain.total for r in reports), default=0.0)
    for scale, name in ((1e18, "EFLOP"), (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP")):
        if largest >= 10 * scale:
            return scale, name
    return 1e6, "MFLOP"


def format_table(reports: Sequence[MethodReport]) -> str:
    """A markdown table: executed, minimum, their ratio, the plain path, per method and overall."""
    unit, unit_name = flop_unit(reports)
    lines = [
        f"| method | executed ({unit_name}) | minimum ({unit_name}) | executed / minimum | plain path ({unit_name}) | plain / minimum |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    totals = [0.0, 0.0, 0.0]
    for r in reports:
        e, m, p = r.executed.total, r.minimum.total, r.plain.total
        totals = [totals[0] + e, totals[1] + m, totals[2] + p]
        lines.append(
            f"| {r.method} | {e / unit:,.1f} | {m / unit:,.1f} | {flop_ratio(e, m)} | {p / unit:,.1f} | {flop_ratio(p, m)} |"
        )
    e, m, p = totals
    lines.append(
        f"| **all** | {e / unit:,.1f} | {m / unit:,.1f} | {flop_ratio(e, m)} | {p / unit:,.1f} | {flop_ratio(p, m)} |"
    )
    return "\n".join(lines)


def format_sources(reports: Sequence[MethodReport]) -> str:
    """Per source: executed / minimum / plain, summed over methods, and each method's executed / minimum."""
    unit, unit_name = flop_unit(reports)
    lines = [
        f"| source | executed ({unit_name}) | minimum ({unit_name}) | plain path ({unit_name}) | "
        + " | ".join(r.method for r in reports)
        + " |",
        "|---|---:|---:|---:|" + "---:|" * len(reports),
    ]
    for key, what in SOURCES:
        e = sum(r.executed.parts.get(key, 0.0) for r in reports)
        m = sum(r.minimum.parts.get(key, 0.0) for r in reports)
        p = sum(r.plain.parts.get(key, 0.0) for r in reports)
        per_method = " | ".join(
            flop_ratio(r.executed.parts.get(key, 0.0), r.minimum.parts.get(key, 0.0)) for r in reports
        )
        lines.append(f"| {what} | {e / unit:,.1f} | {m / unit:,.1f} | {p / unit:,.1f} | {per_method} |")
    return "\n".join(lines)


def flop_ratio(a: float, b: float) -> str:
    if b <= 0:
        return "–" if a <= 0 else "∞"
    return f"{a / b:.2f}x"


def worst_ratio(reports: Sequence[MethodReport]) -> tuple[str, float]:
    ratios = [(r.method, r.executed.total / r.minimum.total) for r in reports if r.minimum.total > 0]
    return max(ratios, key=lambda item: item[1])
