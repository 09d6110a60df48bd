"""The style search of the toy world: frozen-feature CoOp and a linear probe per dataset and style.

    python -m data.toy.calibrate [--datasets toy ...] [--steps N] [--test] [--out FILE]
    python -m data.toy.calibrate --styles dusk tinted ... [--datasets toy ...] --out results/toy/style_search.md
    python -m data.toy.calibrate --datasets toy7 --hue-shifts 15 20 24 30   (a dataset in its own shades)

The world's calibration against real CLIP per method family (CoOp, LoRA, MMA-style,
CLIP-Adapter, the style headroom; results/toy/calibration.md) is
`python -m benchmark.sweeps.toy_calibration`: it trains the suite's methods by the suite's
runs, which this module (a `data` module: it imports only the top level of `benchmark`)
cannot. This one measures, per base-to-novel toy dataset on its test split, on frozen
image features:
  zero-shot Base / Novel   prompt "a photo of a {class name}.", Base over the base classes,
                           Novel over the novel ones (the base2novel protocol);
  linear probe Base        the ceiling of the frozen image features: a multinomial logistic
                           regression on the train split's base-class images (full batch,
                           L-BFGS; the best of a few L2 strengths), on test Base;
  CoOp Base / Novel        a centrally trained CoOp prompt: 16 learned context vectors
                           (random init, std 0.02) before the class-name tokens, both towers
                           frozen, trained on all base-class train images (Adam, lr 5e-3,
                           `--steps` steps of 128 images drawn at random), then the same
                           context on the base and on the novel class names; three
                           initialization seeds, mean +- std.
Each row is checked against the style search's CoOp-only targets (`TARGETS`, how world
versions 4 to 6 were chosen); `--styles` renders each dataset in other styles (the same
objects and nuisances). For `toy_domains` (leave-one-style-out): zero-shot accuracy per
held-out style, and the accuracy of a linear probe / CoOp prompt trained on the other
styles' train images.

Self-contained: torch, open_clip (through `benchmark.backbone`), `benchmark.prompts` and
`data.toy`. Seeded and run at 1 torch thread: the same checkpoint gives the same table.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import math
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from benchmark.files import emit_report
from data.toy import world
from data.toy.datasets import generate_spec_split
from data.toy.pretrain import normalize_images, single_thread

TEMPLATE = "a photo of a {}."
N_CTX = 16
PROBE_L2 = (1e-4, 1e-3, 1e-2)
COOP_LR = 5e-3
COOP_SEEDS = (0, 1, 2)


@dataclasses.dataclass(frozen=True)
class Target:
    """One property of real CLIP a style-search row must show (numbers in points); the
    per-family targets are `data.toy.calibration_targets.TARGETS`."""

    name: str
    rule: str  # how it reads in the table's notes
    met: Callable[[dict], bool]  # the rule, on a calibration row


TARGETS = (
    Target("zs", "zero-shot Base in 60-75", lambda r: 60.0 <= r["zs_base"] <= 75.0),
    Target("novel", "zero-shot Novel within 8 of zero-shot Base", lambda r: abs(r["zs_novel"] - r["zs_base"]) <= 8.0),
    Target("probe", "linear probe Base >= zero-shot Base + 15", lambda r: r["probe_base"] >= r["zs_base"] + 15.0),
    Target(
        "base gain",
        "CoOp Base - its seed std >= zero-shot Base + 8",
        lambda r: r["coop_base"] - r["coop_base_std"] >= r["zs_base"] + 8.0,
    ),
    Target(
        "novel loss",
        "CoOp Novel + its seed std <= zero-shot Novel - 4",
        lambda r: r["coop_novel"] + r["coop_novel_std"] <= r["zs_novel"] - 4.0,
    ),
)


def targets_met(row: dict) -> list[str]:
    """Names of the targets a base-to-novel calibration row meets."""
    return [t.name for t in TARGETS if t.met(row)]


@torch.no_grad()
def image_features(backbone, spec: world.ToySpec, split: str) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(L2-normalized image features [N, D], labels [N], domains) of a split."""
    images, labels, domains, _ = generate_spec_split(spec, split)
    x = normalize_images(images, backbone.image_mean, backbone.image_std)
    feats = torch.cat([backbone.encode_image(x[i : i + 512]) for i in range(0, len(x), 512)])
    return F.normalize(feats, dim=-1), torch.tensor(labels), list(domains)


@torch.no_grad()
def text_features(backbone, names: list[str]) -> torch.Tensor:
    return F.normalize(backbone.zero_shot_text_features(names, TEMPLATE), dim=-1)


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return 100.0 * float((logits.argmax(1) == y).float().mean()) if len(y) else float("nan")


def linear_probe(x_train, y_train, x_test, y_test, num_classes: int) -> float:
    """Best test accuracy over a few L2 strengths of a full-batch logistic regression."""
    best = 0.0
    for l2 in PROBE_L2:
        torch.manual_seed(0)
        w = torch.zeros(x_train.shape[1], num_classes, requires_grad=True)
        b = torch.zeros(num_classes, requires_grad=True)
        opt = torch.optim.LBFGS([w, b], lr=1.0, max_iter=300, history_size=20, line_search_fn="strong_wolfe")
        scale = 10.0  # features are unit norm: a fixed temperature keeps L-BFGS well conditioned

        def closure():
            opt.zero_grad()
            loss = F.cross_entropy(scale * x_train @ w + b, y_train) + l2 * (w * w).sum()
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            best = max(best, accuracy(scale * x_test @ w + b, y_test))
    return best


def coop(
    backbone,
    x_train,
    y_train,
    class_names: list[str],
    steps: int,
    lr: float = COOP_LR,
    seed: int = 0,
    optimizer: str = "adam",
    batch: int | None = 128,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    cosine: bool = False,
    order_seed: int | None = None,
):
    """A CoOp context [N_CTX, W] trained on (x_train, y_train) over `class_names`: Adam on
    random batches by default (the calibration's). `optimizer="sgd"` with `batch=None` is plain
    full-batch gradient descent, what a federated prompt computes when every client makes one
    step a round on its whole data; with `momentum=0.9, weight_decay=5e-4, cosine=True` and
    `batch=32` it is the CoOp paper's recipe (the learning rate decayed by a cosine to 0).
    `seed` draws the initial context and, unless `order_seed` is given, the batches too
    (`data.toy.variance` varies the two apart)."""
    from benchmark.prompts import ContextPrompts

    prompts = ContextPrompts(backbone, N_CTX)
    g = torch.Generator().manual_seed(seed)
    width = backbone.text.width
    ctx = (torch.randn(N_CTX, width, generator=g) * 0.02).requires_grad_(True)  # CoOp's random init
    if order_seed is not None:
        g = torch.Generator().manual_seed(order_seed)
    if optimizer == "adam":
        opt = torch.optim.Adam([ctx], lr=lr, weight_decay=weight_decay)
    elif optimizer == "sgd":
        opt = torch.optim.SGD([ctx], lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        raise ValueError(f"coop: optimizer {optimizer!r} is not 'adam' or 'sgd'")
    scale = backbone.logit_scale
    for step in range(steps):
        if cosine:
            opt.param_groups[0]["lr"] = lr * 0.5 * (1 + math.cos(math.pi * step / steps))
        if batch is None:
            idx = slice(None)
        else:
            idx = torch.randint(0, len(y_train), (min(batch, len(y_train)),), generator=g)
        txt = F.normalize(prompts.encode(ctx, class_names), dim=-1)
        loss = F.cross_entropy(scale * x_train[idx] @ txt.T, y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return prompts, ctx.detach()


@torch.no_grad()
def coop_logits(prompts, ctx, x, class_names):
    return x @ F.normalize(prompts.encode(ctx, class_names), dim=-1).T


def calibrate_base2novel(backbone, spec: world.ToySpec, steps: int) -> dict:
    names = spec.class_names
    nb = spec.novel_from
    base_names, novel_names = names[:nb], names[nb:]
    xtr, ytr, _ = image_features(backbone, spec, "train")
    xte, yte, _ = image_features(backbone, spec, "test")
    btr, bte, nte = ytr < nb, yte < nb, yte >= nb
    style = "+".join(spec.domains) + (", close-ups" if spec.object_size is not None else "")
    style += "".join(f", {attribute} synonyms" for attribute in spec.synonyms)
    style += f", colours' hue turned ±{spec.hue_shift:g}" if spec.hue_shift else ""
    out = {"dataset": spec.name, "style": style, "base_classes": nb, "novel_classes": len(names) - nb}
    out["zs_base"] = accuracy(xte[bte] @ text_features(backbone, base_names).T, yte[bte])
    out["zs_novel"] = accuracy(xte[nte] @ text_features(backbone, novel_names).T, yte[nte] - nb)
    out["probe_base"] = linear_probe(xtr[btr], ytr[btr], xte[bte], yte[bte], nb)
    bases, novels = [], []
    for seed in COOP_SEEDS:
        prompts, ctx = coop(backbone, xtr[btr], ytr[btr], base_names, steps, seed=seed)
        bases.append(accuracy(coop_logits(prompts, ctx, xte[bte], base_names), yte[bte]))
        novels.append(accuracy(coop_logits(prompts, ctx, xte[nte], novel_names), yte[nte] - nb))
    out["coop_base_seeds"], out["coop_novel_seeds"] = bases, novels
    out["coop_base"], out["coop_base_std"] = statistics.mean(bases), statistics.stdev(bases)
    out["coop_novel"], out["coop_novel_std"] = statistics.mean(novels), statistics.stdev(novels)
    out["targets"] = targets_met(out)
    return out


def calibrate_domains(backbone, spec: world.ToySpec, steps: int) -> dict:
    names = spec.class_names
    xtr, ytr, dtr = image_features(backbone, spec, "train")
    xte, yte, dte = image_features(backbone, spec, "test")
    txt = text_features(backbone, names)
    out = {"dataset": spec.name, "styles": {}}
    for style in spec.domains:
        held = torch.tensor([d == style for d in dte])
        others = torch.tensor([d != style for d in dtr])
        prompts, ctx = coop(backbone, xtr[others], ytr[others], names, steps)
        out["styles"][style] = {
            "zs": accuracy(xte[held] @ txt.T, yte[held]),
            "probe": linear_probe(xtr[others], ytr[others], xte[held], yte[held], len(names)),
            "coop": accuracy(coop_logits(prompts, ctx, xte[held], names), yte[held]),
        }
    return out


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibrate(
    backbone,
    datasets: list[str] | None = None,
    steps: int = 300,
    styles: list[str] | None = None,
    random_size: bool = False,
    synonyms: list[str] | None = None,
    hue_shifts: list[float] | None = None,
) -> list[dict]:
    """The calibration rows of `datasets` (default: every base2novel and domains toy dataset of
    world version 6);
    with `styles`, each base-to-novel dataset once per style instead of in its own; with
    `random_size`, objects of both sizes even where the dataset shows close-ups; with
    `synonyms`, base-to-novel classes named by those attributes' rarer words; with `hue_shifts`,
    each base-to-novel dataset once per turn of its colours' shades (`world.shaded_colours`)."""
    specs = world.all_toy_specs()
    if datasets is None:
        datasets = [n for n, s in world.toy_specs().items() if s.protocol in ("base2novel", "domains")]
    unknown = [n for n in datasets if n not in specs]
    if unknown:
        raise SystemExit(f"calibrate: unknown toy dataset(s) {unknown}; known: {sorted(specs)}")
    try:
        for candidate in styles or ():
            world.style(candidate)
        world.named_with(specs["toy"], synonyms or ())
    except ValueError as error:
        raise SystemExit(f"calibrate: {error}") from None
    rows = []
    with single_thread():
        torch.manual_seed(0)
        for name in datasets:
            spec = specs[name]
            if spec.protocol == "domains":
                if not styles:
                    rows.append(calibrate_domains(backbone, spec, steps))
                continue
            for style in styles or [None]:
                variant = spec if style is None else dataclasses.replace(spec, domains=(style,))
                if random_size:
                    variant = dataclasses.replace(variant, object_size=None)
                if synonyms:
                    variant = world.named_with(variant, synonyms)
                for hue in [None] if hue_shifts is None else hue_shifts:
                    shaded = variant if hue is None else dataclasses.replace(variant, hue_shift=float(hue))
                    rows.append(calibrate_base2novel(backbone, shaded, steps))
    return rows


def _cell(mean: float, std: float) -> str:
    return f"{mean:.1f} ± {std:.1f}"


def to_markdown(
    rows: list[dict], command: str, checkpoint: str, sha256: str, steps: int, version: int = world.WORLD_VERSION
) -> str:
    lines = [
        "# Toy world calibration",
        "",
        f"Made by `{command}`; checkpoint `{checkpoint}` (sha256 `{sha256}`), world version "
        f"{version}, CoOp {N_CTX} context vectors x {steps} Adam steps (lr {COOP_LR:g}, batch 128, "
        f"mean ± std over initialization seeds {', '.join(map(str, COOP_SEEDS))}), linear probe: best of L2 "
        f"{', '.join(f'{c:g}' for c in PROBE_L2)}. Accuracies in %, test split.",
        "",
        "Real CLIP ViT-B/16 for comparison (CoOp/CoCoOp papers, mean of 11 datasets): zero-shot "
        "Base 69.3 / Novel 74.2, CoOp Base 82.7 / Novel 63.2.",
        "",
        "| dataset | style | ZS Base | ZS Novel | linear probe Base | CoOp Base | CoOp Novel | "
        "CoOp - ZS Base | CoOp - ZS Novel | targets met |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    domain_rows = []
    for r in rows:
        if "styles" in r:
            domain_rows.append(r)
            continue
        met = r["targets"]
        lines.append(
            f"| {r['dataset']} | {r['style']} | {r['zs_base']:.1f} | {r['zs_novel']:.1f} | {r['probe_base']:.1f} | "
            f"{_cell(r['coop_base'], r['coop_base_std'])} | {_cell(r['coop_novel'], r['coop_novel_std'])} | "
            f"{r['coop_base'] - r['zs_base']:+.1f} | {r['coop_novel'] - r['zs_novel']:+.1f} | "
            f"{'all' if len(met) == len(TARGETS) else f'{len(met)} of {len(TARGETS)}: not ' + ', '.join(t.name for t in TARGETS if t.name not in met)} |"
        )
    if any("styles" not in r for r in rows):
        lines += [
            "",
            "Targets (real CLIP's base-to-novel regime): " + "; ".join(f"{t.name}: {t.rule}" for t in TARGETS) + ".",
        ]
    for r in domain_rows:
        lines += [
            "",
            f"`{r['dataset']}`, leave one style out (probe and CoOp trained on the other styles' train images):",
            "",
            "| held-out style | ZS | linear probe | CoOp |",
            "|---|---|---|---|",
        ]
        for style, s in r["styles"].items():
            lines.append(f"| {style} | {s['zs']:.1f} | {s['probe']:.1f} | {s['coop']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument("--test", action="store_true", help="the test suite's small model")
    parser.add_argument(
        "--datasets",
        nargs="+",
        default=None,
        help="toy datasets (default: the base2novel and domains ones)",
    )
    parser.add_argument("--steps", type=int, default=300, help="CoOp training steps")
    parser.add_argument(
        "--styles",
        nargs="+",
        default=None,
        help="render each base2novel dataset in each of these styles instead: a style's name or effects joined by '+' (glow+fade+scatter), with its pixel noise "
        f"after '@' if not {world.DOWNSTREAM_NOISE} (glow+fade+scatter@0.02)",
    )
    parser.add_argument(
        "--random-size", action="store_true", help="objects of both sizes, also where a dataset shows close-ups"
    )
    parser.add_argument(
        "--synonyms",
        nargs="+",
        default=None,
        metavar="ATTRIBUTE",
        help="name each base2novel dataset's classes by these attributes' rarer words (colour: crimson, ...)",
    )
    parser.add_argument(
        "--hue-shifts",
        nargs="+",
        type=float,
        default=None,
        metavar="DEGREES",
        help="render each base2novel dataset once per turn of its colours' shades (0: pretraining's)",
    )
    args = parser.parse_args(argv)
    from benchmark.backbone import load_backbone
    from benchmark.backbone_weights import PRETRAINED_PROVIDERS

    version, pretrained = world.measured_world("calibrate", args.datasets, args.test)
    checkpoint = PRETRAINED_PROVIDERS[pretrained]()
    backbone = load_backbone("fedbench-toy-vit", pretrained)
    t0 = time.time()
    command = "python -m data.toy.calibrate " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    sha = file_sha256(checkpoint)
    rows = calibrate(backbone, args.datasets, args.steps, args.styles, args.random_size, args.synonyms, args.hue_shifts)
    text = to_markdown(rows, command.strip(), Path(checkpoint).name, sha, args.steps, version)
    if args.styles:
        text = text.replace("# Toy world calibration", "# Toy world calibration: a style search", 1)
    return emit_report(text, args.out, t0)


if __name__ == "__main__":
    main()
