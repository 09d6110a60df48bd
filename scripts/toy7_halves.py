"""World version 7: zero-shot accuracy of each class family in candidate styles and object
sizes, and the base/novel halves that the version 7 CLIP recognizes most equally.

For each family (two attributes) and candidate (style, object size), 30 images of each of
the 64 attribute combinations are rendered from a seed apart from every dataset split; for
each of the 35 x 35 ways to cut both vocabularies into two halves of four (the first value in
the first half), zero-shot Base is the accuracy over the 16 first-half classes' images among
their 16 names, Novel the same over the second half. Printed: the mean over all splits (how
hard the family is in that rendering), and the split with the smallest |Base - Novel| whose
mean lies in 60-75, with its Base and Novel. Zero-shot only: nothing here is trained, and no
adaptation result is read.

    PYTHONPATH=. python scripts/toy7_halves.py [--candidates crowded:0 pale:1 cluttered:1:24 ...] [--families colour:pattern ...]

A candidate is style:size[:hue[:stretch]]: size 0 (small), 1 (large) or - (both); stretch, each
shape's proportion (`world.stretch_factors`, as `ToySpec.shape_stretch`); hue, degrees every colour's
shade is turned (`world.shaded_colours`, as `ToySpec.hue_shift`; default 0). With a turn (hue, or stretch),
only the splits whose colour (shape) halves each hold two values turned each way are kept: a half turned one
way alone would share one correction, the label-free headroom version 7 removed.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import torch.nn.functional as F

import data.toy  # noqa: F401  (registers the toy CLIPs' weights)
from benchmark.backbone import load_backbone
from data.toy import world
from data.toy.pretrain import normalize_images, single_thread

PROBE_SEED = 770077  # apart from every split's seed (those are crc32 of "name/split/seed")
PER_CLASS = 30


def halves(k: int = 8):
    """Every cut of range(k) into two halves of k/2 with 0 in the first."""
    for rest in itertools.combinations(range(1, k), k // 2 - 1):
        first = (0, *rest)
        yield first, tuple(i for i in range(k) if i not in first)


@torch.no_grad()
def family_scores(
    backbone, first: str, second: str, domain: str, size: int | None, hue: float = 0.0, stretch: float = 0.0
):
    combos = [(i, j) for i in range(8) for j in range(8)]
    labels = torch.arange(len(combos)).repeat_interleave(PER_CLASS)
    g = torch.Generator().manual_seed(PROBE_SEED)
    free = world.random_attrs(len(labels), g)
    cols = {a: free.get(a).clone() for a in world.ATTRIBUTES}
    cols[first] = torch.tensor([c[0] for c in combos])[labels]
    cols[second] = torch.tensor([c[1] for c in combos])[labels]
    if size is not None:
        cols["size"] = torch.full_like(cols["size"], size)
    colours = world.shaded_colours(hue) if hue else None  # a dataset's own shades (ToySpec.hue_shift)
    images = world.render(world.Attrs(**cols), domain, 32, seed=PROBE_SEED + 1, colours=colours, stretch=stretch)
    x = normalize_images(images, backbone.image_mean, backbone.image_std)
    img = F.normalize(torch.cat([backbone.encode_image(x[i : i + 512]) for i in range(0, len(x), 512)]), dim=-1)
    names = [world.object_name(**{first: i, second: j}) for i, j in combos]
    txt = F.normalize(backbone.zero_shot_text_features(names, "a photo of a {}."), dim=-1)
    sims = img @ txt.T  # [images, 64 classes]

    def acc(a_half, b_half):
        cls = torch.tensor([k for k, (i, j) in enumerate(combos) if i in a_half and j in b_half])
        mask = torch.isin(labels, cls)
        pred = cls[sims[mask][:, cls].argmax(1)]
        return 100.0 * float((pred == labels[mask]).float().mean())

    rows = []
    for (a0, a1), (b0, b1) in itertools.product(halves(), halves()):
        rows.append(((a0, a1), (b0, b1), acc(a0, b0), acc(a1, b1)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrained", default="fedbench-toy7")
    parser.add_argument("--families", nargs="+", default=["colour:pattern", "colour:shape", "pattern:shape"])
    parser.add_argument("--candidates", nargs="+", default=["crowded:0", "crowded:-", "pale:-", "cluttered:1"])
    args = parser.parse_args()
    backbone = load_backbone("fedbench-toy-vit", args.pretrained)
    with single_thread():
        for family in args.families:
            first, second = family.split(":")
            for candidate in args.candidates:
                domain, size_text, hue_text, stretch_text = (candidate.split(":") + ["", "", ""])[:4]
                size = None if size_text in ("", "-") else int(size_text)
                hue, stretch = float(hue_text or 0), float(stretch_text or 0)
                rows = family_scores(backbone, first, second, domain, size, hue, stretch)
                mean = sum((b + n) / 2 for *_, b, n in rows) / len(rows)
                turned = {"colour": hue, "shape": stretch}  # each half holds both turns (module doc)
                for i, attribute in enumerate((first, second)):
                    if turned.get(attribute):
                        rows = [r for r in rows if sum(k % 2 for k in r[i][0]) == 2]
                fits = [r for r in rows if 60 <= (r[2] + r[3]) / 2 <= 75] or rows
                best = min(fits, key=lambda r: abs(r[2] - r[3]))
                print(
                    f"{first} x {second} | {domain} size {size_text or '-'} hue {hue_text or 0} "
                    f"stretch {stretch:g} | "
                    f"mean over splits {mean:.1f} | "
                    f"most balanced: {first} {best[0]} {second} {best[1]} Base {best[2]:.1f} Novel {best[3]:.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
