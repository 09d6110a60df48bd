"""CLIP-Adapter: a residual bottleneck MLP on the final image feature, federated by FedAvg.

Gao et al., "CLIP-Adapter: Better Vision-Language Models with Feature Adapters" (IJCV
2024); behaviour from docs/methods.md and the authors' clip_adapter.py (visual adapter).
A(f) = ReLU(W2 ReLU(W1 f)) with W1 [D/4, D], W2 [D, D/4], no biases;
f' = ratio * A(f) + (1 - ratio) * f, ratio = 0.2; text frozen ("a photo of a {name}.").

No official federated version exists. Default: a global method, the whole adapter
uploaded and averaged (FedAvg by n_i). `personalized=True` is this suite's personalized
variant (recorded in the run's method_args; label it in any table): the adapter never leaves the
client, nothing is uploaded.

The authors apply the adapter to the raw CLIP feature and normalize after the blend.
Linear maps without bias and ReLU are positively homogeneous (A(c f) = c A(f), c > 0), so
normalize(f'(f)) = normalize(f'(f / |f|)): applying it to the normalized, cached CLIP
feature gives the same logits and the same gradients. So `encode_images` is the frozen
default and the adapter runs in `classify`: training and evaluation use cached features.

Optimizer: the released trainer is a CoOp/Dassl plugin run "with CoOp's command" (its
README), so it takes CoOp's recipe: SGD lr 0.002, momentum 0.9, weight decay 5e-4, cosine
over the local steps.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.optim import COSINE_OVER_LOCAL_STEPS, sgd_with_cosine
from benchmark.prompts import FixedClassTexts, FrozenClassTexts


def residual_blend(features: Tensor, adapter: nn.Module, ratio: float) -> Tensor:
    """f' = ratio * A(f) + (1 - ratio) * f (not normalized)."""
    return ratio * adapter(features) + (1.0 - ratio) * features


@register_method("clip_adapter")
class CLIPAdapter(FrozenClassTexts, FederatedMethod):
    """Visual residual adapter; uploaded whole (global) unless `personalized`."""

    tunable = {"lr": LogUniform.around(0.002)}  # around the paper's lr, the default below
    lr_schedule = COSINE_OVER_LOCAL_STEPS
    ranges = {**OPTIMIZER_RANGES, "reduction": Range(ge=1), "ratio": Range(ge=0, le=1)}
    upload_keys = ("adapter.*",)
    frozen_image_features = True
    batched_training = True

    def __init__(
        self,
        backbone: Backbone,
        reduction: int = 4,
        ratio: float = 0.2,
        template: str = "a photo of a {}.",
        personalized: bool = False,
        lr: float = 0.002,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__(backbone)
        dim = backbone.embed_dim
        if dim % reduction:
            raise ValueError(f"reduction must divide the feature dimension {dim}, got {reduction}")
        if "{}" not in template:
            raise ValueError(f"template must contain '{{}}' where the class name goes, got {template!r}")
        self.save_hyperparameters(ignore=["backbone"])
        if personalized:
            self.upload_keys = ()  # the personalized variant: nothing leaves the client
        # PyTorch's default Linear init, as in the authors' Adapter.
        self.adapter = nn.Sequential(
            nn.Linear(dim, dim // reduction, bias=False),
            nn.ReLU(),
            nn.Linear(dim // reduction, dim, bias=False),
            nn.ReLU(),
        )
        self._text = FixedClassTexts(backbone, template)

    def classify(self, image_features: Tensor, class_features: Tensor) -> Tensor:
        blended = F.normalize(residual_blend(image_features, self.adapter, self.hparams.ratio), dim=-1)
        return self.backbone.logit_scale * blended @ class_features.t()

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_with_cosine(self, self.adapter.parameters(), hp.lr, hp.momentum, hp.weight_decay)
