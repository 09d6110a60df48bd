"""CLIP's image transforms as the protocol fixes them (docs/protocols.md, Evaluation protocol)."""

from __future__ import annotations

from dataclasses import dataclass

from torchvision import transforms as T

from data.base import Transform

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class ImageTransforms:
    """The pair every loader receives; `key` names them for feature-cache keys."""

    train: Transform
    test: Transform
    key: str


def clip_transforms(
    image_size: int,
    mean: tuple[float, ...] = OPENAI_MEAN,
    std: tuple[float, ...] = OPENAI_STD,
    augment: bool = True,
) -> ImageTransforms:
    """Train: RandomResizedCrop(scale 0.08-1, bicubic) + flip; test: Resize + CenterCrop.

    `augment=False` uses the test transform for training too (CIFAR protocol, toy world),
    which also makes training inputs deterministic and so cacheable.
    """
    bicubic = T.InterpolationMode.BICUBIC
    normalize = [T.ToTensor(), T.Normalize(mean, std)]
    test = T.Compose([T.Resize(image_size, interpolation=bicubic), T.CenterCrop(image_size), *normalize])
    if not augment:
        return ImageTransforms(test, test, f"clip{image_size}-noaug")
    train = T.Compose(
        [
            T.RandomResizedCrop(image_size, scale=(0.08, 1.0), interpolation=bicubic),
            T.RandomHorizontalFlip(),
            *normalize,
        ]
    )
    return ImageTransforms(train, test, f"clip{image_size}-aug")
