"""PromptFL: a CoOp context shared by all classes, federated with sample-weighted FedAvg.

The released PromptFL code does not run; the baseline later papers report is CoOp +
FedAvg weighted by n_i, which is this. A global method: nothing stays personal.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.backbone import Backbone
from benchmark.method import FederatedMethod
from benchmark.optim import sgd_with_cosine
from benchmark.prompts import ContextPrompts
from benchmark.registry import register_method


@register_method("promptfl")
class PromptFL(FederatedMethod):
    """CoOp context [n_ctx, text width] ~ N(0, 0.02), uploaded whole each round."""

    upload_keys = ("ctx",)
    frozen_image_features = True

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        init_std: float = 0.02,
        lr: float = 0.002,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        self.ctx = nn.Parameter(torch.randn(n_ctx, backbone.text.width) * init_std)

    def encode_classes(self, class_names):
        return F.normalize(self.prompts.encode(self.ctx, class_names), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_with_cosine(self, [self.ctx], hp.lr, hp.momentum, hp.weight_decay)
