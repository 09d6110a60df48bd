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
"""

from __future__ import annotations

import statistics

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


def main() -> None:
    backbone = load_backbone("fedbench-toy-vit", "fedbench-toy")
    spec = world.toy_specs()["toy"]
    nb = spec.novel_from
    base, novel = spec.class_names[:nb], spec.class_names[nb:]
    with single_thread():
        x_train, y_train, _ = image_features(backbone, spec, "train")
        x_test, y_test, _ = image_features(backbone, spec, "test")
        on_base = y_train < nb
        x_base, y_base = x_train[on_base], y_train[on_base]
        test_base, test_novel = y_test < nb, y_test >= nb
        zs_base = accuracy(x_test[test_base] @ text_features(backbone, base).T, y_test[test_base])
        zs_novel = accuracy(x_test[test_novel] @ text_features(backbone, novel).T, y_test[test_novel] - nb)
        print(f"toy, test split: zero-shot Base {zs_base:.1f}, Novel {zs_novel:.1f}")
        adam = dict(optimizer="adam", batch=128)
        descent = dict(optimizer="sgd", batch=None)
        paper = dict(optimizer="sgd", batch=32, momentum=0.9, weight_decay=5e-4, cosine=True)
        rows = [("Adam, batch 128 of all base train images", False, adam, lr, steps) for lr, steps in ADAM]
        rows += [("CoOp paper's SGD, 16 shots, batch 32", True, paper, lr, steps) for lr, steps in COOP_PAPER]
        rows += [("gradient descent, 16 shots, full batch", True, descent, lr, steps) for lr, steps in GRADIENT_DESCENT]
        for label, few_shot, recipe, lr, steps in rows:
            bases, novels = [], []
            for seed in SEEDS:
                keep = few_shot_indices(y_base.tolist(), 16, seed) if few_shot else slice(None)
                x, y = x_base[keep], y_base[keep]
                prompts, ctx = coop(backbone, x, y, base, steps, lr=lr, seed=seed, **recipe)
                bases.append(accuracy(coop_logits(prompts, ctx, x_test[test_base], base), y_test[test_base]))
                novels.append(accuracy(coop_logits(prompts, ctx, x_test[test_novel], novel), y_test[test_novel] - nb))
            b, n = statistics.mean(bases), statistics.mean(novels)
            print(
                f"{label}, lr {lr:g}, {steps} steps: Base {b:.1f} +- {statistics.stdev(bases):.1f} "
                f"({b - zs_base:+.1f}), Novel {n:.1f} +- {statistics.stdev(novels):.1f} ({n - zs_novel:+.1f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
