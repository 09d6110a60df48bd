"""The toy world against real CLIP, per method family: `python -m benchmark.sweeps.toy_calibration`.

    python -m benchmark.sweeps.toy_calibration [--datasets toy ...] [--seeds 1 2 3] [--quick] [--test]
        [--out results/toy/calibration.md]

For each toy base-to-novel dataset and seed, the suite's own runs (`run_experiment`, no
training loop of this module's) of the demo preset's central row: one client holding every
client's base-class training images, trained with the preset's run settings and tuned
learning rate under the central row's rule (`servers/central.py`), scored under
base2novel on the test split:

  zero-shot   `zeroshot`, the prompt "a photo of a {class}.";
  coop        `promptfl` (a CoOp prompt; both towers frozen);
  lora        `lora` (CLIP-LoRA: q, k, v of both towers, the image tower included);
  mma         `pfedmma` (MMA-style adapters in both towers; nothing federated centrally);
  adapter     `clip_adapter` (CLIP-Adapter's residual feature adapter).

Base - ZS and Novel - ZS are per seed (a seed also draws the few-shot sample and, where the
world draws one, the test images), then averaged; their standard deviation over seeds is
the measured noise that widens each target (`calibration_targets.met`).

Style headroom (label-free): a copy of the toy CLIP whose image tower alone is tuned so that
each base-class training object, rendered in the dataset's style, maps onto the frozen
CLIP's feature of the same object (attributes, position, size, rotation, colour jitter,
background) rendered in a pretraining style (`world.PRETRAIN_DOMAINS[0]`) and in
pretraining's shades of its colours and proportions of its shapes (a dataset may show its own:
`ToySpec.hue_shift`, `ToySpec.shape_stretch`); no
label is read. Its gain in zero-shot Novel is what a correction every class shares gives for free:
real CLIP's base-to-novel has no such headroom.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmark.backbone import load_backbone
from benchmark.backbone_weights import PRETRAINED_PROVIDERS
from benchmark.files import emit_report
from benchmark.runs.runner import run_experiment
from benchmark.sweeps.presets import load_preset
from data.toy import world
from data.toy.calibration_targets import (
    PUBLISHED,
    REAL_ZERO_SHOT_BASE,
    REAL_ZERO_SHOT_NOVEL,
    REAL_ZERO_SHOT_SOURCE,
    TARGETS,
    Target,
    met,
)
from data.toy.datasets import generate_spec_split
from data.toy.pretrain import file_sha256, normalize_images, single_thread

PRESET = "toy"  # the demo's preset: its datasets, run settings and tuned learning rates
FAMILIES = {"coop": "promptfl", "lora": "lora", "mma": "pfedmma", "adapter": "clip_adapter"}
FAMILY_NAMES = {
    "coop": "CoOp (promptfl)",
    "lora": "LoRA (lora)",
    "mma": "MMA-style (pfedmma)",
    "adapter": "CLIP-Adapter (clip_adapter)",
}
HEADROOM_STEPS = 200
HEADROOM_LR = 3e-4
HEADROOM_BATCH = 64


@dataclasses.dataclass(frozen=True)
class Settings:
    """How much a calibration trains: the full one, or `--quick` (the tests')."""

    rounds: int | None = None  # None: the preset's
    headroom_steps: int = HEADROOM_STEPS
    pretrained: str | None = None  # None: the preset's checkpoint
    # learning-rate factors (times the preset's tuned lr) each family chooses from, per
    # dataset, by validation HM at `tune_seeds` (never the test split): empty, the preset's lr
    lr_factors: tuple[float, ...] = ()
    tune_seeds: tuple[int, ...] = (101, 102)
    lr_extensions: int = 2  # steps past an end of `lr_factors` while the best sits there


def demo_datasets() -> list[str]:
    return [d["name"] for d in load_preset(PRESET).datasets]


def central_configs(dataset: str, seeds: list[int], settings: Settings) -> dict[str, dict[int, Any]]:
    """{family or 'zero-shot': {seed: RunConfig}}: the preset's central row of each family's
    method on `dataset` (any toy dataset: the preset's run settings, its dataset swapped)."""
    preset = load_preset(PRESET)
    methods = {"zero-shot": "zeroshot", **FAMILIES}
    overrides: dict[str, Any] = {"federation": "central", "wandb": "disabled", "checkpoint_every": 0}
    if settings.rounds is not None:
        overrides["rounds"] = settings.rounds
    if settings.pretrained is not None:
        overrides["pretrained"] = settings.pretrained
    first = preset.datasets[0]["name"]
    configs: dict[str, dict[int, Any]] = {}
    for cell in preset.cells(overrides, seeds=seeds, datasets=[first], methods=list(methods.values())):
        family = next(f for f, m in methods.items() if m == cell.config.method)
        configs.setdefault(family, {})[cell.config.seed] = dataclasses.replace(cell.config, dataset=dataset)
    return configs


def run_scores(config) -> tuple[float, float]:
    """(Base, Novel) of one run, in %, on its test split."""
    metrics = run_experiment(config, write=False, progress=False).summary["metrics"]
    return metrics["Base"], metrics["Novel"]


def with_lr(config, lr: float):
    return dataclasses.replace(config, method_args={**config.method_args, "lr": lr})


def choose_lr(config, settings: Settings) -> tuple[float, dict[float, float]]:
    """The learning rate of `config`'s family on its dataset: of the preset's lr times each of
    `settings.lr_factors`, the one with the best mean validation HM over `settings.tune_seeds`
    (the objective `fedbench tune` uses for every row; the test split is never read). While
    the best sits at an end of the factors tried, one more step past that end (the ratio of
    the two factors there) is tried, up to `settings.lr_extensions` times, as `fedbench tune`
    extends a range. Returns (lr, {lr: mean validation HM}, in the order tried)."""
    lr0 = config.method_args["lr"]
    curve: dict[float, float] = {}

    def trial(factor: float) -> None:
        values = []
        for seed in settings.tune_seeds:
            run = dataclasses.replace(with_lr(config, lr0 * factor), seed=seed, eval_split="val")
            values.append(run_experiment(run, write=False, progress=False).summary["metrics"]["HM"])
        curve[factor] = statistics.mean(values)

    for factor in sorted(settings.lr_factors):
        trial(factor)
    for _ in range(settings.lr_extensions if len(curve) > 1 else 0):
        tried = sorted(curve)
        best = max(curve, key=curve.get)
        if best == tried[0]:
            trial(tried[0] * tried[0] / tried[1])
        elif best == tried[-1]:
            trial(tried[-1] * tried[-1] / tried[-2])
        else:
            break
    best = max(curve, key=curve.get)
    return lr0 * best, {lr0 * f: hm for f, hm in curve.items()}


def _spread(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def measure_dataset(dataset: str, seeds: list[int], settings: Settings, backbone) -> dict:
    """One dataset's calibration row: zero-shot, every family's gains per seed, the headroom."""
    configs = central_configs(dataset, seeds, settings)
    zs = {s: run_scores(configs["zero-shot"][s]) for s in seeds}
    row: dict[str, Any] = {"dataset": dataset, "seeds": list(seeds), "families": {}}
    row["zs_base"], row["zs_base_std"] = _spread([zs[s][0] for s in seeds])
    row["zs_novel"], row["zs_novel_std"] = _spread([zs[s][1] for s in seeds])
    row["zs_gap"], row["zs_gap_std"] = _spread([zs[s][1] - zs[s][0] for s in seeds])
    for family in FAMILIES:
        curve: dict[float, float] = {}
        if settings.lr_factors:
            lr, curve = choose_lr(configs[family][seeds[0]], settings)
            configs[family] = {s: with_lr(c, lr) for s, c in configs[family].items()}
        scores = {s: run_scores(configs[family][s]) for s in seeds}
        base_gain = [scores[s][0] - zs[s][0] for s in seeds]
        novel_gain = [scores[s][1] - zs[s][1] for s in seeds]
        row["families"][family] = {
            "lr": configs[family][seeds[0]].method_args.get("lr"),
            "lr_curve": curve,
            "base": _spread([scores[s][0] for s in seeds]),
            "novel": _spread([scores[s][1] for s in seeds]),
            "base_gain": _spread(base_gain),
            "novel_gain": _spread(novel_gain),
        }
    spec = world.all_toy_specs()[dataset]
    gains = [style_headroom(backbone, spec, seed, settings.headroom_steps) for seed in seeds]
    row["novel_headroom"] = _spread(gains)
    row["checks"] = check_row(row)
    return row


def measured(row: dict, target: Target) -> tuple[float, float]:
    """(seed mean, seed std) of the toy number `target` is about, from a calibration row."""
    if target.family == "zero-shot":
        return row[target.quantity], row[f"{target.quantity}_std"]
    if target.family == "headroom":
        return row["novel_headroom"]
    return row["families"][target.family][target.quantity]


def check_row(row: dict) -> dict[str, bool]:
    """{target key: met} for every target (pure: a row of numbers in, verdicts out)."""
    return {t.key: met(t, *measured(row, t)) for t in TARGETS}


# -- the label-free style headroom -------------------------------------------------------
def _normalized(images: torch.Tensor, backbone) -> torch.Tensor:
    return normalize_images(images, backbone.image_mean, backbone.image_std)


def _rendered(
    attrs: world.Attrs, style: str, seed: int, image_size: int, colours=None, stretch: float = 0.0
) -> torch.Tensor:
    """`attrs` rendered in `style` (in `colours`' shades and `stretch`'s proportions; None and 0:
    pretraining's), one render per
    chunk from the chunk's own seed: the geometry, colour jitter and background are drawn
    before any style effect, so two styles give the same objects."""
    chunks = []
    for k, start in enumerate(range(0, len(attrs), world.RENDER_CHUNK)):
        part = world.Attrs(*(attrs.get(a)[start : start + world.RENDER_CHUNK] for a in world.ATTRIBUTES))
        chunks.append(world.render(part, style, image_size, seed=seed * 1000 + k, colours=colours, stretch=stretch))
    return torch.cat(chunks)


@torch.no_grad()
def _zero_shot_novel(backbone, images: torch.Tensor, labels: torch.Tensor, names: list[str]) -> float:
    feats = torch.cat([backbone.encode_image(images[i : i + 256]) for i in range(0, len(images), 256)])
    text = backbone.zero_shot_text_features(names, "a photo of a {}.")
    logits = F.normalize(feats, dim=-1) @ F.normalize(text, dim=-1).T
    return 100.0 * float((logits.argmax(1) == labels).float().mean())


def style_headroom(backbone, spec: world.ToySpec, seed: int, steps: int) -> float:
    """Zero-shot Novel gain (points, test split) of the label-free style correction (module doc)."""
    nb = spec.novel_from
    _, labels, _, attrs = generate_spec_split(spec, "train")
    base = torch.tensor(labels) < nb
    objects = world.Attrs(*(attrs.get(a)[base] for a in world.ATTRIBUTES))
    size = backbone.image_size
    (style,) = spec.domains
    # as the dataset shows them; the target: as pretraining does
    source = _normalized(_rendered(objects, style, seed, size, spec.colours, spec.shape_stretch), backbone)
    target_images = _normalized(_rendered(objects, world.PRETRAIN_DOMAINS[0], seed, size), backbone)
    with torch.no_grad():
        target = F.normalize(backbone.encode_image(target_images), dim=-1)
    tuned = copy.deepcopy(backbone)
    visual = tuned.model.visual.requires_grad_(True)
    optimizer = torch.optim.Adam(visual.parameters(), lr=HEADROOM_LR)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(source), (min(HEADROOM_BATCH, len(source)),), generator=g)
        loss = 1 - (F.normalize(tuned.encode_image(source[idx]), dim=-1) * target[idx]).sum(-1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    visual.requires_grad_(False)
    test_images, test_labels, _, _ = generate_spec_split(spec, "test")
    novel = torch.tensor(test_labels) >= nb
    x = _normalized(test_images, backbone)[novel]
    y = torch.tensor(test_labels)[novel] - nb
    names = spec.class_names[nb:]
    return _zero_shot_novel(tuned, x, y, names) - _zero_shot_novel(backbone, x, y, names)


def calibrate_families(backbone, datasets: list[str], seeds: list[int], settings: Settings) -> list[dict]:
    specs = world.all_toy_specs()
    protocol = load_preset(PRESET).run["protocol"]  # the protocol of the rows the families train as
    wrong = [d for d in datasets if d not in specs or specs[d].protocol != protocol]
    if wrong:
        known = sorted(n for n, s in specs.items() if s.protocol == protocol)
        raise SystemExit(f"calibrate: {wrong} are not base-to-novel toy datasets; expected some of {known}")
    if len(seeds) < 2:
        raise SystemExit(f"calibrate: --seeds {seeds} gives no spread; give at least 2 seeds (3 for the table)")
    with single_thread():
        return [measure_dataset(d, seeds, settings, backbone) for d in datasets]


# -- the report ------------------------------------------------------------------------
def _pm(mean_std: tuple[float, float], sign: bool = False) -> str:
    mean, std = mean_std
    return f"{mean:+.1f} ± {std:.1f}" if sign else f"{mean:.1f} ± {std:.1f}"


def _real(family: str) -> str:
    rows = [p for p in PUBLISHED if p.family == family]
    return "; ".join(f"{p.method} {p.base_gain:+.2f} / {p.novel_gain:+.2f} ({p.source})" for p in rows)


def families_markdown(rows: list[dict], head: str) -> str:
    lines = [
        "# Toy world calibration, per method family",
        "",
        head,
        "",
        f"Real CLIP ViT-B/16 zero-shot: Base {REAL_ZERO_SHOT_BASE} / Novel {REAL_ZERO_SHOT_NOVEL} "
        f"({REAL_ZERO_SHOT_SOURCE}).",
    ]
    for row in rows:
        seeds = ", ".join(map(str, row["seeds"]))
        lines += [
            "",
            f"## {row['dataset']}",
            "",
            f"Zero-shot Base {_pm((row['zs_base'], row['zs_base_std']))}, Novel "
            f"{_pm((row['zs_novel'], row['zs_novel_std']))} (mean ± std over seeds {seeds}). "
            f"Style headroom (label-free, zero-shot Novel gain): {_pm(row['novel_headroom'], sign=True)}.",
            "",
            "| family | lr | Base | Novel | Base - ZS | Novel - ZS | real centralized Base - ZS / Novel - ZS |",
            "|---|---|---|---|---|---|---|",
        ]
        for family, f in row["families"].items():
            lr = "-" if f["lr"] is None else f"{f['lr']:.4g}"
            lines.append(
                f"| {FAMILY_NAMES[family]} | {lr} | {_pm(f['base'])} | {_pm(f['novel'])} | "
                f"{_pm(f['base_gain'], True)} | {_pm(f['novel_gain'], True)} | {_real(family) or 'none quoted'} |"
            )
        lines += [
            "",
            "| target | toy (mean ± std) | range (widened by the std) | met | source |",
            "|---|---|---|---|---|",
        ]
        for t in TARGETS:
            mean, std = measured(row, t)
            verdict = "yes" if row["checks"][t.key] else "**no**"
            lines.append(
                f"| {t.key} | {_pm((mean, std), t.quantity != 'zs_base')} | {t.rule()} | {verdict} | {t.source} |"
            )
        curves = {f: c["lr_curve"] for f, c in row["families"].items() if c.get("lr_curve")}
        if curves:
            lines += ["", "Validation HM by lr (in bold the lr chosen, the best; an end's best extends the range):", ""]
            lines += [
                f"- {FAMILY_NAMES[f]}: "
                + ", ".join(
                    (f"**{lr:.3g} → {hm:.2f}**" if lr == row["families"][f]["lr"] else f"{lr:.3g} → {hm:.2f}")
                    for lr, hm in sorted(c.items())
                )
                for f, c in curves.items()
            ]
        missed = [k for k, ok in row["checks"].items() if not ok]
        lines += ["", f"{row['dataset']}: " + ("every target met." if not missed else f"not met: {', '.join(missed)}.")]
    lines += [
        "",
        "Published rows quoted for the prompt family but not trained here (no CoCoOp, KgCoOp or MaPLe "
        "central row in the calibration): " + _real("prompt") + ".",
    ]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    parser.add_argument("--test", action="store_true", help="the test suite's small toy CLIP")
    parser.add_argument(
        "--datasets", nargs="+", default=None, help=f"base-to-novel toy datasets (default: the {PRESET} preset's)"
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, default=None, help=f"run seeds (default: the {PRESET} preset's)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 round and 5 headroom steps: checks that everything runs (tests)"
    )
    parser.add_argument(
        "--lr-factors",
        nargs="+",
        type=float,
        default=[],
        help="each family chooses its lr per dataset from the preset's lr times these factors, by "
        "validation HM at --tune-seeds (default: the preset's lr, no choice)",
    )
    parser.add_argument(
        "--lr-extensions",
        type=int,
        default=2,
        help="steps past an end of --lr-factors while the best lr sits there (default: 2)",
    )
    parser.add_argument(
        "--tune-seeds", nargs="+", type=int, default=[101, 102], help="seeds of the lr choice (default: 101 102)"
    )
    return parser


def main(argv: list[str] | None = None) -> str:
    parser = build_parser()
    args = parser.parse_args(argv)
    if set(args.tune_seeds) & set(args.seeds or load_preset(PRESET).seeds):
        parser.error("--tune-seeds must differ from --seeds: the lr is chosen on runs the report does not show")
    if any(f <= 0 for f in args.lr_factors):
        parser.error(f"--lr-factors {args.lr_factors}: every factor must be > 0")
    datasets = args.datasets or demo_datasets()
    version, pretrained = world.measured_world("toy_calibration", datasets, args.test)
    checkpoint = PRETRAINED_PROVIDERS[pretrained]()
    backbone = load_backbone("fedbench-toy-vit", pretrained)
    t0 = time.time()
    settings = Settings(
        rounds=1 if args.quick else None,
        headroom_steps=5 if args.quick else HEADROOM_STEPS,
        pretrained=pretrained,
        lr_factors=tuple(args.lr_factors),
        tune_seeds=tuple(args.tune_seeds),
        lr_extensions=args.lr_extensions,
    )
    seeds = args.seeds or load_preset(PRESET).seeds
    rows = calibrate_families(backbone, datasets, seeds, settings)
    command = "python -m benchmark.sweeps.toy_calibration " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    head = (
        f"Made by `{command.strip()}`; checkpoint `{Path(checkpoint).name}` (sha256 `{file_sha256(checkpoint)}`), "
        f"world version {version}. Every family trained as the `{PRESET}` preset's central row (its run "
        "settings"
        + (", 1 round (--quick)" if args.quick else "")
        + ", "
        + (
            f"its lr chosen per dataset from the preset's times {', '.join(f'{f:g}' for f in settings.lr_factors)} by "
            f"validation HM at seeds {', '.join(map(str, settings.tune_seeds))}"
            if settings.lr_factors
            else "its tuned lr"
        )
        + " under the central rule), seeds "
        f"{', '.join(map(str, seeds))}; style headroom: {settings.headroom_steps} Adam steps (lr {HEADROOM_LR:g}, "
        f"batch {HEADROOM_BATCH}) of the image tower alone. Accuracies in %, test split."
    )
    text = families_markdown(rows, head)
    return emit_report(text, args.out, t0)


if __name__ == "__main__":
    main()
