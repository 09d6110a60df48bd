"""Where a toy row's spread over seeds comes from: each source of randomness varied alone.

    python -m data.toy.variance [--datasets toy7 ...] [--seeds 5] [--steps 300] [--out FILE]

A row's seed draws four things; on the toy world each can be drawn apart:
  init   the method's initialization (the CoOp context),
  shots  the few-shot draw (16 of a base class's 32 train images),
  order  the order of the training batches (the central run's stand-in for client order),
  test   the test images (a fresh draw of the test split: same classes, new objects and
         nuisances; a fixed test set makes zero-shot's std 0).
For each source, `--seeds` runs vary it alone (the others at seed 0), and `all` varies every
source together (what a user's rerun with another seed varies). The method is the
calibration's CoOp (`data.toy.calibrate.coop`, centrally on frozen image features), the rows
zero-shot and CoOp; per source the std over seeds of Base, Novel and HM, and each source's
share of the summed HM variance. Seeded and at 1 torch thread: the same checkpoint gives the
same table.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmark.files import emit_report
from data.fewshot import few_shot_indices
from data.toy import world
from data.toy.calibrate import accuracy, coop, coop_logits, file_sha256, text_features
from data.toy.datasets import generate_spec_split
from data.toy.pretrain import normalize_images, single_thread

SOURCES = ("init", "shots", "order", "test")
SHOTS = 16


def harmonic_mean(a: float, b: float) -> float:
    return 2 * a * b / (a + b) if a + b else 0.0


@torch.no_grad()
def _features(backbone, spec: world.ToySpec, split: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels, _, _ = generate_spec_split(spec, split, seed)
    x = normalize_images(images, backbone.image_mean, backbone.image_std)
    feats = torch.cat([backbone.encode_image(x[i : i + 512]) for i in range(0, len(x), 512)])
    return F.normalize(feats, dim=-1), torch.tensor(labels)


def one_run(backbone, spec: world.ToySpec, seeds: dict[str, int], steps: int, cache: dict) -> dict[str, float]:
    """Zero-shot and CoOp Base / Novel / HM with each source drawn from its own seed."""
    nb = spec.novel_from
    names = spec.class_names
    if ("train", 0) not in cache:
        cache["train", 0] = _features(backbone, spec, "train", 0)
    if ("test", seeds["test"]) not in cache:
        cache["test", seeds["test"]] = _features(backbone, spec, "test", seeds["test"])
    xtr, ytr = cache["train", 0]
    xte, yte = cache["test", seeds["test"]]
    shots = few_shot_indices(ytr.tolist(), SHOTS, seeds["shots"], class_ids=range(nb))
    bte, nte = yte < nb, yte >= nb
    out = {
        "zs_base": accuracy(xte[bte] @ text_features(backbone, names[:nb]).T, yte[bte]),
        "zs_novel": accuracy(xte[nte] @ text_features(backbone, names[nb:]).T, yte[nte] - nb),
    }
    prompts, ctx = coop(
        backbone, xtr[shots], ytr[shots], names[:nb], steps, seed=seeds["init"], order_seed=seeds["order"]
    )
    out["coop_base"] = accuracy(coop_logits(prompts, ctx, xte[bte], names[:nb]), yte[bte])
    out["coop_novel"] = accuracy(coop_logits(prompts, ctx, xte[nte], names[nb:]), yte[nte] - nb)
    for row in ("zs", "coop"):
        out[f"{row}_hm"] = harmonic_mean(out[f"{row}_base"], out[f"{row}_novel"])
    return out


def decompose(backbone, spec: world.ToySpec, n_seeds: int, steps: int) -> dict[str, list[dict]]:
    """{source or 'all': the runs with that source (or every source) at seeds 1..n_seeds}."""
    cache: dict = {}
    runs = {}
    for source in (*SOURCES, "all"):
        runs[source] = []
        for seed in range(1, n_seeds + 1):
            seeds = {s: (seed if source in (s, "all") else 0) for s in SOURCES}
            runs[source].append(one_run(backbone, spec, seeds, steps, cache))
    return runs


def to_markdown(results: dict[str, dict], command: str, checkpoint: str, sha256: str, n_seeds: int, steps: int) -> str:
    lines = [
        "# Toy world: where a row's spread comes from",
        "",
        f"Made by `{command}`; checkpoint `{checkpoint}` (sha256 `{sha256}`). Each source varied alone over "
        f"seeds 1-{n_seeds} (the others at seed 0); `all` varies every source with the seed, as a rerun does. "
        f"CoOp: {steps} Adam steps on {SHOTS} shots of each base class (data.toy.calibrate.coop). Std over seeds "
        "in points; share: the source's HM variance over the sum of the four sources' HM variances.",
    ]
    for name, runs in results.items():
        lines += [
            "",
            f"`{name}`",
            "",
            "| row | source | Base std | Novel std | HM std | share of HM variance |",
            "|---|---|---|---|---|---|",
        ]
        for row, label in (("zs", "zero-shot"), ("coop", "CoOp")):
            var = {s: statistics.variance([r[f"{row}_hm"] for r in runs[s]]) for s in runs}
            total = sum(var[s] for s in SOURCES)
            for source in (*SOURCES, "all"):
                std = {m: statistics.stdev([r[f"{row}_{m}"] for r in runs[source]]) for m in ("base", "novel", "hm")}
                share = "" if source == "all" else (f"{100 * var[source] / total:.0f} %" if total else "0 %")
                lines.append(
                    f"| {label} | {source} | {std['base']:.2f} | {std['novel']:.2f} | {std['hm']:.2f} | {share} |"
                )
            mean = statistics.mean(r[f"{row}_hm"] for r in runs["all"])
            lines.append(f"| {label} | (mean HM, `all`) | | | {mean:.2f} | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(world.toy7_specs()), help="base2novel toy datasets")
    parser.add_argument("--seeds", type=int, default=5, help="seeds per source (at least 2)")
    parser.add_argument("--steps", type=int, default=300, help="CoOp training steps")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = parser.parse_args(argv)
    specs = world.all_toy_specs()
    wrong = [n for n in args.datasets if n not in specs or specs[n].protocol != "base2novel"]
    if wrong:
        base2novel = [n for n, s in specs.items() if s.protocol == "base2novel"]
        raise SystemExit(f"variance: {wrong} are not base2novel toy datasets; expected some of {base2novel}")
    versions = {specs[n].world for n in args.datasets}
    if len(versions) > 1:
        raise SystemExit(f"variance: --datasets mixes world versions {sorted(versions)}; measure one at a time")
    if args.seeds < 2:
        raise SystemExit(f"variance: --seeds {args.seeds}: a std needs at least 2 seeds")
    from benchmark.backbone import load_backbone
    from benchmark.backbone_weights import PRETRAINED_PROVIDERS

    pretrained = world.WORLD_PRETRAINED[versions.pop()]
    checkpoint = PRETRAINED_PROVIDERS[pretrained]()
    backbone = load_backbone("fedbench-toy-vit", pretrained)
    t0 = time.time()
    with single_thread():
        torch.manual_seed(0)
        results = {n: decompose(backbone, specs[n], args.seeds, args.steps) for n in args.datasets}
    command = "python -m data.toy.variance " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    text = to_markdown(results, command.strip(), Path(checkpoint).name, file_sha256(checkpoint), args.seeds, args.steps)
    return emit_report(text, args.out, t0)


if __name__ == "__main__":
    main()
