"""How world version 4 chose `toy`'s rendering style: candidate styles scored by what a prompt learns.

For each candidate style, `toy`'s images are rendered in it and scored on the shipped toy
CLIP: zero-shot Base / Novel, the linear-probe ceiling, and the gain of a CoOp prompt (16
context vectors) trained centrally with PromptFL's optimizer (SGD, momentum 0.9, weight
decay 5e-4, cosine) on the 16-shot sample a federation sees, batch 8, 20 epochs, at lr 0.002
and 0.0005 and two initialization seeds. A style is useful when zero-shot Base is in 60-75 %
and the gain is large and the same at every seed and lr (a gain that moves with the seed is
the instability a table cannot rank methods on). About a minute per style at one thread.

    PYTHONPATH=. python scripts/toy_style_search.py [STYLE ...]
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

import data.toy  # noqa: F401  (registers the toy CLIP's weights)
import data.toy.datasets as toy_datasets
from benchmark.backbone import load_backbone
from benchmark.prompts import ContextPrompts
from data.toy import world
from data.toy.calibrate import accuracy, image_features, linear_probe, text_features

# effect sets (world.py documents each effect), pixel noise 0.05 as every downstream style
CANDIDATES = {
    "lamplit": {"warm", "crowd"},
    "dusk": {"tint", "fade"},
    "tint": {"tint"},
    "warm+fade": {"warm", "fade"},
    "tint+scatter": {"tint", "scatter"},
    "warm+fade+crowd": {"warm", "fade", "crowd"},
    "fade+crowd": {"fade", "crowd"},
    "tint+crowd": {"tint", "crowd"},
    "warm+fade+scatter": {"warm", "fade", "scatter"},
    "dusk+scatter": {"tint", "fade", "scatter"},
    "dusk+blob": {"tint", "fade", "blob"},
    "dusk+bars": {"tint", "fade", "bars"},
}


def sgd_coop(backbone, x, y, names, lr: float, seed: int, batch: int = 8, epochs: int = 20):
    g = torch.Generator().manual_seed(seed)
    prompts = ContextPrompts(backbone, 16)
    ctx = (torch.randn(16, backbone.text.width, generator=g) * 0.02).requires_grad_(True)
    opt = torch.optim.SGD([ctx], lr=lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * (len(y) // batch))
    for _ in range(epochs):
        order = torch.randperm(len(y), generator=g)
        for i in range(0, len(y) - batch + 1, batch):
            j = order[i : i + batch]
            text = F.normalize(prompts.encode(ctx, names), dim=-1)
            loss = F.cross_entropy(backbone.logit_scale * x[j] @ text.T, y[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    return prompts, ctx.detach()


def score_style(backbone, style: str) -> str:
    world.STYLES[style] = (frozenset(CANDIDATES[style]), 0.05)
    world.DOMAINS[:] = list(world.STYLES)
    saved = world.TOY_DOMAIN
    world.TOY_DOMAIN = style
    toy_datasets.generate_split.cache_clear()
    try:
        spec = world.toy_specs()["toy"]
        names, nb = spec.class_names, spec.novel_from
        x_train, y_train, _ = image_features(backbone, "toy", "train")
        x_test, y_test, _ = image_features(backbone, "toy", "test")
    finally:
        world.TOY_DOMAIN = saved
        toy_datasets.generate_split.cache_clear()
    base, novel = y_test < nb, y_test >= nb
    zs_base = accuracy(x_test[base] @ text_features(backbone, names[:nb]).T, y_test[base])
    zs_novel = accuracy(x_test[novel] @ text_features(backbone, names[nb:]).T, y_test[novel] - nb)
    probe = linear_probe(x_train[y_train < nb], y_train[y_train < nb], x_test[base], y_test[base], nb)
    g = torch.Generator().manual_seed(1)
    shots = torch.cat([torch.nonzero(y_train == c).flatten()[torch.randperm(32, generator=g)[:16]] for c in range(nb)])
    row = [style, f"{zs_base:.1f}", f"{zs_novel:.1f}", f"{probe:.1f}"]
    for lr in (0.002, 0.0005):
        for seed in (0, 1):
            prompts, ctx = sgd_coop(backbone, x_train[shots], y_train[shots], names[:nb], lr, seed)
            with torch.no_grad():
                b = accuracy(x_test[base] @ F.normalize(prompts.encode(ctx, names[:nb]), dim=-1).T, y_test[base])
                n = accuracy(x_test[novel] @ F.normalize(prompts.encode(ctx, names[nb:]), dim=-1).T, y_test[novel] - nb)
            row.append(f"{b - zs_base:+.1f} / {n - zs_novel:+.1f}")
    return "| " + " | ".join(row) + " |"


def main() -> None:
    torch.set_num_threads(1)
    styles = sys.argv[1:] or list(CANDIDATES)
    backbone = load_backbone("fedbench-toy-vit", "fedbench-toy")
    print("Gain of the SGD-trained CoOp prompt over zero-shot, Base / Novel (16 shots), per lr and seed:\n")
    print(
        "| style | ZS Base | ZS Novel | probe Base | lr 0.002 seed 0 | lr 0.002 seed 1 | lr 0.0005 seed 0 | lr 0.0005 seed 1 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for style in styles:
        print(score_style(backbone, style), flush=True)


if __name__ == "__main__":
    main()
