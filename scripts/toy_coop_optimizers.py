"""Does the toy world's base-to-novel trade-off depend on how the prompt is trained?

Central CoOp on `toy`'s test split, three context seeds per row, three ways:
  - the calibration's: Adam on batches of 128 of every base-class train image, 300 steps;
  - the CoOp paper's: SGD with momentum 0.9 and weight decay 5e-4, lr 0.002 decayed by a
    cosine, batches of 32 drawn at random from 16 shots per base class, 1600 steps (200
    epochs of the 256 images) and 400 (50 epochs);
  - the toy preset's federated PromptFL, centrally: plain gradient descent on the whole of
    16 shots per base class, one step per "round". At batch 32 every client of the preset
    makes one step a round on its 32 images from the global prompt (a fresh optimizer each
    round, so no momentum), and the average of those steps is one full-batch gradient step
    of the clients' union.
The 16 shots are drawn per seed by the suite's own sampler (`data.fewshot.few_shot_indices`).

    PYTHONPATH=. python scripts/toy_coop_optimizers.py

Prints one line per optimizer x learning rate x steps: Base and Novel mean +- std over the
seeds, and their difference from zero-shot. Runs at one torch thread (about two minutes).

    PYTHONPATH=. python scripts/toy_coop_optimizers.py --styles twilight tint+fade+blob@0.02 ...

searches worlds under the federated schedule instead: `toy` rendered in each style (a style's
name, or effects joined by '+' with an optional pixel noise after '@', as
`data.toy.calibrate --styles` takes), gradient descent for `--steps` steps at each rate of
`--lrs` (the tuner searches 0.0002-0.06 for PromptFL), and one markdown row per style: zero-shot,
and the rate whose HM is highest -- the one an HM tuner would pick -- with its Base and Novel.
`--synonyms colour pattern` names the classes by those attributes' rarer words (as
`data.toy.calibrate --synonyms` does; results/toy/style_search.md, sections 5 and 6).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

import torch

from benchmark.backbone import load_backbone
from data.fewshot import few_shot_indices
from data.toy import world
from data.toy.calibrate import accuracy, coop, coop_logits, image_features, text_features
from data.toy.pretrain import single_thread

SEEDS = (0, 1, 2)
ADAM = [(lr, 300) for lr in (1e-3, 5e-3, 2e-2)]
# 0.00256 and 0.0122: the learning rates `fedbench tune toy` chose for PromptFL at 40 and at
# 80 rounds (results/toy/federation_search.md, section 3).
GRADIENT_DESCENT = [(lr, steps) for lr in (0.00256, 0.0122) for steps in (40, 80, 160)]
COOP_PAPER = [(0.002, 1600), (0.002, 400)]


SEARCH_LRS = (0.001, 0.0025, 0.005, 0.01, 0.02)


def harmonic_mean(base: float, novel: float) -> float:
    return 2 * base * novel / (base + novel) if base + novel > 0 else 0.0


def best_by_hm(rows: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """The (lr, Base, Novel) row with the highest harmonic mean (the first of equals)."""
    return max(rows, key=lambda row: harmonic_mean(row[1], row[2]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--styles", nargs="+", help="search these styles under gradient descent instead")
    parser.add_argument("--lrs", nargs="+", type=float, default=list(SEARCH_LRS), help="rates of the search")
    parser.add_argument("--steps", type=int, default=40, help="gradient-descent steps of the search")
    parser.add_argument(
        "--synonyms",
        nargs="+",
        default=(),
        metavar="ATTRIBUTE",
        help="name the classes by these attributes' rarer words",
    )
    args = parser.parse_args(argv)
    try:
        for candidate in args.styles or ():
            world.style(candidate)
        world.named_with(world.toy_specs()["toy"], args.synonyms)
    except ValueError as error:
        raise SystemExit(f"toy_coop_optimizers: {error}") from None
    backbone = load_backbone("fedbench-toy-vit", "fedbench-toy")
    if args.styles:
        search(backbone, args.styles, args.lrs, args.steps, args.synonyms)
    else:
        compare_recipes(backbone)


@dataclasses.dataclass(frozen=True)
class Features:
    """One toy world's frozen image features: the base classes' training images and the test
    split's two halves (novel labels counted from 0), with the halves' class names."""

    base: list[str]
    novel: list[str]
    x_base: torch.Tensor
    y_base: torch.Tensor
    x_test_base: torch.Tensor
    y_test_base: torch.Tensor
    x_test_novel: torch.Tensor
    y_test_novel: torch.Tensor


def features(backbone, spec) -> Features:
    nb = spec.novel_from
    x_train, y_train, _ = image_features(backbone, spec, "train")
    x_test, y_test, _ = image_features(backbone, spec, "test")
    on_base, test_base, test_novel = y_train < nb, y_test < nb, y_test >= nb
    return Features(
        spec.class_names[:nb],
        spec.class_names[nb:],
        x_train[on_base],
        y_train[on_base],
        x_test[test_base],
        y_test[test_base],
        x_test[test_novel],
        y_test[test_novel] - nb,
    )


def zero_shot(backbone, f: Features) -> tuple[float, float]:
    """Zero-shot (Base, Novel) accuracy."""
    return (
        accuracy(f.x_test_base @ text_features(backbone, f.base).T, f.y_test_base),
        accuracy(f.x_test_novel @ text_features(backbone, f.novel).T, f.y_test_novel),
    )


def coop_over_seeds(backbone, f: Features, steps: int, lr: float, few_shot: bool, **recipe):
    """(Base accuracies, Novel accuracies) of a CoOp context trained at each of SEEDS, on 16
    shots per base class drawn with that seed (or on every base training image)."""
    bases, novels = [], []
    for seed in SEEDS:
        keep = few_shot_indices(f.y_base.tolist(), 16, seed) if few_shot else slice(None)
        prompts, ctx = coop(backbone, f.x_base[keep], f.y_base[keep], f.base, steps, lr=lr, seed=seed, **recipe)
        bases.append(accuracy(coop_logits(prompts, ctx, f.x_test_base, f.base), f.y_test_base))
        novels.append(accuracy(coop_logits(prompts, ctx, f.x_test_novel, f.novel), f.y_test_novel))
    return bases, novels


def search(backbone, styles: list[str], lrs: list[float], steps: int, synonyms=()) -> None:
    print(
        f"`toy`'s classes per style, test split; gradient descent on 16 shots per base class, {steps} steps, "
        f"seeds {', '.join(map(str, SEEDS))}, at lr {', '.join(f'{lr:g}' for lr in lrs)}; the row's lr is the one "
        "whose mean HM is highest"
        + "".join(f"; classes named by their {attribute} synonyms" for attribute in synonyms)
        + ".\n"
    )
    print("| style | ZS Base | ZS Novel | lr | Base | Novel | Base - ZS | Novel - ZS | Novel - ZS at each lr |")
    print("|---|---|---|---|---|---|---|---|---|")
    toy = world.named_with(world.toy_specs()["toy"], synonyms)
    with single_thread():
        for name in styles:
            f = features(backbone, dataclasses.replace(toy, domains=(name,)))
            zs_base, zs_novel = zero_shot(backbone, f)
            rows = []
            for lr in lrs:
                bases, novels = coop_over_seeds(backbone, f, steps, lr, True, optimizer="sgd", batch=None)
                rows.append((lr, statistics.mean(bases), statistics.mean(novels)))
            lr, b, n = best_by_hm(rows)
            each = " / ".join(f"{row[2] - zs_novel:+.1f}" for row in rows)
            print(
                f"| {name} | {zs_base:.1f} | {zs_novel:.1f} | {lr:g} | {b:.1f} | {n:.1f} | {b - zs_base:+.1f} | "
                f"{n - zs_novel:+.1f} | {each} |",
                flush=True,
            )


def compare_recipes(backbone) -> None:
    with single_thread():
        f = features(backbone, world.toy_specs()["toy"])
        zs_base, zs_novel = zero_shot(backbone, f)
        print(f"toy, test split: zero-shot Base {zs_base:.1f}, Novel {zs_novel:.1f}")
        adam = dict(optimizer="adam", batch=128)
        descent = dict(optimizer="sgd", batch=None)
        paper = dict(optimizer="sgd", batch=32, momentum=0.9, weight_decay=5e-4, cosine=True)
        rows = [("Adam, batch 128 of all base train images", False, adam, lr, steps) for lr, steps in ADAM]
        rows += [("CoOp paper's SGD, 16 shots, batch 32", True, paper, lr, steps) for lr, steps in COOP_PAPER]
        rows += [("gradient descent, 16 shots, full batch", True, descent, lr, steps) for lr, steps in GRADIENT_DESCENT]
        for label, few_shot, recipe, lr, steps in rows:
            bases, novels = coop_over_seeds(backbone, f, steps, lr, few_shot, **recipe)
            b, n = statistics.mean(bases), statistics.mean(novels)
            print(
                f"{label}, lr {lr:g}, {steps} steps: Base {b:.1f} +- {statistics.stdev(bases):.1f} "
                f"({b - zs_base:+.1f}), Novel {n:.1f} +- {statistics.stdev(novels):.1f} ({n - zs_novel:+.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
