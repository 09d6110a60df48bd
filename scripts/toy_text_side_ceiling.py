"""How far can a method that leaves the image features frozen lift Base accuracy on `toy`?

Such a method (PromptFL and every prompt learner: only the class embeddings move) classifies
by the cosine between a frozen image feature and one vector per class, i.e. it is a linear
classifier with normalized class vectors. This script trains the best such classifier
centrally on *all* base-class train images of the toy world (512, twice the 16 shots a
federation sees), starting from the zero-shot text features, and scores it on the base
classes of the validation split. Its accuracy is an estimate of the ceiling of any
frozen-image-feature method there (not a proof: another classifier could generalize better).

    PYTHONPATH=. python scripts/toy_text_side_ceiling.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

import data.toy  # noqa: F401  (registers the toy CLIP's weights)
from benchmark.backbone import load_backbone
from data.partition import base_novel_split
from data.toy import world
from data.toy.datasets import generate_split
from data.toy.pretrain import normalize_images


@torch.no_grad()
def base_features(backbone, split: str, base: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels, _, _ = generate_split("toy", split)
    x = normalize_images(images, backbone.image_mean, backbone.image_std)
    features = torch.cat([backbone.encode_image(x[i : i + 512]) for i in range(0, len(x), 512)])
    y = torch.tensor(labels)
    keep = torch.isin(y, torch.tensor(base))
    index = {c: i for i, c in enumerate(base)}
    return F.normalize(features[keep], dim=-1), torch.tensor([index[int(c)] for c in y[keep]])


def accuracy(features: torch.Tensor, classes: torch.Tensor, y: torch.Tensor) -> float:
    return 100 * float(((features @ F.normalize(classes, dim=-1).T).argmax(1) == y).float().mean())


def main() -> None:
    torch.manual_seed(0)
    backbone = load_backbone("fedbench-toy-vit", "fedbench-toy")
    spec = world.toy_specs()["toy"]
    base, _ = base_novel_split(len(spec.classes))
    x_train, y_train = base_features(backbone, "train", base)
    x_val, y_val = base_features(backbone, "val", base)
    with torch.no_grad():
        text = F.normalize(
            backbone.zero_shot_text_features([spec.class_names[c] for c in base], "a photo of a {}."), dim=-1
        )
    print(f"{len(y_train)} base-class train images, {len(y_val)} validation images")
    print(f"zero-shot: validation Base {accuracy(x_val, text, y_val):.2f}")
    for decay in (0.0, 1e-4, 1e-3, 1e-2):
        classes = torch.nn.Parameter(text.clone())
        optimizer = torch.optim.Adam([classes], lr=0.01)
        for _ in range(1500):
            logits = backbone.logit_scale * x_train @ F.normalize(classes, dim=-1).T
            loss = F.cross_entropy(logits, y_train) + decay * (classes - text).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            print(
                f"best normalized linear classifier (pull to zero-shot {decay}): train {accuracy(x_train, classes, y_train):.2f}, "
                f"validation Base {accuracy(x_val, classes, y_val):.2f}"
            )


if __name__ == "__main__":
    main()
