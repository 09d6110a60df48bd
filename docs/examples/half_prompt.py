"""HalfPrompt: a CoOp context split into a federated half and a personal half.

The first `n_shared` context vectors are uploaded and averaged with FedAvg each round;
the other `n_ctx - n_shared` never leave the client, so each client keeps a prompt of
its own on top of what all clients learn together.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.optim import sgd_with_cosine
from benchmark.prompts import ContextPrompts
from benchmark.registry import register_method


@register_method("half_prompt")
class HalfPrompt(FederatedMethod):
    """CoOp context: the first n_shared vectors FedAvg'd, the rest personal."""

    lr_schedule = "SGD, cosine from lr to 0 over each client-round's steps (CoOp's recipe)"
    upload_keys = ("shared_ctx",)  # fnmatch patterns over state_dict keys; the rest stays home
    frozen_image_features = True  # only the text side learns: image features can be cached
    tunable = {"lr": LogUniform.around(0.002)}  # what `fedbench tune` searches: lr in [0.0002, 0.06]
    ranges = {**OPTIMIZER_RANGES, "n_ctx": Range(ge=2)}  # the values allowed, checked before anything is built

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        n_shared: int = 8,
        init_std: float = 0.02,
        lr: float = 0.002,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        """Args:
        n_ctx: number of learned context vectors before the class name (CoOp: 16).
        n_shared: how many of them, the first ones, are uploaded and averaged each round.
        init_std: standard deviation of the context's normal initialization.
        lr: SGD learning rate, decayed by a cosine over the client-round.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        """
        super().__init__(backbone)
        if not 0 < n_shared < n_ctx:
            raise ValueError(f"n_shared must be between 1 and n_ctx - 1 = {n_ctx - 1}, got {n_shared}")
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        width = backbone.text.width
        self.shared_ctx = nn.Parameter(torch.randn(n_shared, width) * init_std)
        self.personal_ctx = nn.Parameter(torch.randn(n_ctx - n_shared, width) * init_std)

    def encode_classes(self, class_names):
        ctx = torch.cat([self.shared_ctx, self.personal_ctx])  # [n_ctx, width]
        return F.normalize(self.prompts.encode(ctx, class_names), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_with_cosine(self, self.parameters(), hp.lr, hp.momentum, hp.weight_decay)
