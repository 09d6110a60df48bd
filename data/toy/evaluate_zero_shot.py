"""Zero-shot acceptance numbers of the toy CLIP (measured, never hard-coded).

    python -m data.toy.evaluate_zero_shot                 # default model (the shipped checkpoint)
    python -m data.toy.evaluate_zero_shot --test          # the test suite's small model
    python -m data.toy.evaluate_zero_shot --datasets toy7 toy7_shapes toy7_patterns   # version 7, its CLIP

Prints, for `toy`, `toy_shapes` and `toy_patterns` (or `--datasets` of one world version, on
that version's toy CLIP; prompt "a photo of a {class name}."):
Base / Novel / Local as the protocol defines them (Local: 10 clients, each its own base
classes' test images classified over all base classes), accuracy among classes that share
one attribute and differ in the other, and single-attribute accuracies (prompt names only
that attribute), each with its chance level.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from data.partition import base_novel_split, deal_classes
from data.toy import world
from data.toy.datasets import generate_split
from data.toy.pretrain import normalize_images

TEMPLATE = "a photo of a {}."


@torch.no_grad()
def _image_features(backbone, dataset: str) -> tuple[torch.Tensor, list[int], world.Attrs]:
    images, labels, _, attrs = generate_split(dataset, "test")
    x = normalize_images(images, backbone.image_mean, backbone.image_std)
    feats = torch.cat([backbone.encode_image(x[i : i + 512]) for i in range(0, len(x), 512)])
    return torch.nn.functional.normalize(feats, dim=-1), labels, attrs


@torch.no_grad()
def _text_features(backbone, names: list[str]) -> torch.Tensor:
    return torch.nn.functional.normalize(backbone.zero_shot_text_features(names, TEMPLATE), dim=-1)


def _acc(pred: torch.Tensor, true: torch.Tensor) -> float:
    return float((pred == true).float().mean()) if len(true) else float("nan")


@torch.no_grad()
def evaluate(backbone, dataset: str = "toy", num_clients: int = 10) -> dict:
    spec = world.all_toy_specs()[dataset]
    img, labels, attrs = _image_features(backbone, dataset)
    y = torch.tensor(labels)
    txt = _text_features(backbone, spec.class_names)
    sims = img @ txt.T
    C = len(spec.classes)
    base, novel = base_novel_split(C)
    out: dict = {"dataset": dataset, "classes": C, "base_classes": len(base), "novel_classes": len(novel)}

    def restricted(class_ids: list[int], rows: torch.Tensor) -> float:
        ids = torch.tensor(class_ids)
        pred = ids[sims[rows][:, ids].argmax(1)]
        return _acc(pred, y[rows])

    is_base = y < len(base)
    out["base"] = restricted(base, is_base.nonzero().flatten())
    out["novel"] = restricted(novel, (~is_base).nonzero().flatten())
    out["chance_base"] = 1 / len(base)
    out["chance_novel"] = 1 / len(novel)
    num_clients = min(num_clients, max(1, len(base) // 2))  # deal_classes needs >= 2 classes per client
    out["local_clients"] = num_clients
    clients = deal_classes(base, num_clients)
    local = [restricted(base, torch.isin(y, torch.tensor(cl)).nonzero().flatten()) for cl in clients]
    out["local"] = sum(local) / len(local)

    # among classes that share one defining attribute and differ in another
    defining = [a for a, _ in spec.classes[0].fixed]
    table = {a: torch.tensor([c.attr(a) for c in spec.classes]) for a in defining}
    for shared in defining:
        for other in defining:
            if other == shared:
                continue
            for part, rows in (("base", is_base), ("novel", ~is_base)):
                pool = torch.tensor(base if part == "base" else novel)
                correct = []
                for r in rows.nonzero().flatten().tolist():
                    cand = pool[table[shared][pool] == table[shared][y[r]]]
                    correct.append(int(cand[sims[r, cand].argmax()] == y[r]))
                n_cand = [(table[shared][pool] == v).sum().item() for v in table[shared][pool].unique()]
                out[f"{other}|same {shared} ({part})"] = sum(correct) / len(correct)
                out[f"chance {other}|same {shared} ({part})"] = sum(1 / k for k in n_cand) / len(n_cand)

    # one attribute named alone ("a photo of a triangle.", "a photo of a red object.")
    for a in world.ATTRIBUTES:
        vocab = world.VOCAB[a]
        names = [world.object_name(**{a: i}) for i in range(len(vocab))]
        pred = (img @ _text_features(backbone, names).T).argmax(1)
        out[f"attribute {a}"] = _acc(pred, attrs.get(a))
        out[f"chance attribute {a}"] = 1 / len(vocab)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--test", action="store_true", help="the test suite's small model")
    parser.add_argument("--datasets", nargs="+", default=["toy", "toy_shapes", "toy_patterns"])
    args = parser.parse_args(argv)
    from benchmark.backbone import load_backbone

    _, pretrained = world.measured_world("evaluate_zero_shot", args.datasets, args.test)
    name = "fedbench-toy-vit"
    t0 = time.time()
    backbone = load_backbone(name, pretrained)
    print(f"load_backbone({name!r}, {pretrained!r}): {time.time() - t0:.1f} s")
    results = {}
    for dataset in args.datasets:
        r = evaluate(backbone, dataset)
        results[dataset] = r
        print(f"\n== {dataset} ({r['classes']} classes: {r['base_classes']} base / {r['novel_classes']} novel)")
        print(f"  Base  {100 * r['base']:5.1f} %   (chance {100 * r['chance_base']:.1f})")
        print(f"  Novel {100 * r['novel']:5.1f} %   (chance {100 * r['chance_novel']:.1f})")
        print(f"  Local {100 * r['local']:5.1f} %   ({r['local_clients']} clients, over all base classes)")
        for k, v in r.items():
            if ("|" in k or k.startswith("attribute")) and not k.startswith("chance"):
                print(f"  {k:34s} {100 * v:5.1f} %   (chance {100 * r['chance ' + k]:.1f})")
    return results


if __name__ == "__main__":
    json.dumps(main())
