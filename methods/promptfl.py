"""PromptFL: a CoOp context shared by all classes, federated with sample-weighted FedAvg.

The released PromptFL code does not run; the baseline later papers report is CoOp +
FedAvg weighted by n_i, which is this. A global method: nothing stays personal.

Optimizer: CoOp's recipe, as pFedMoAP's prompt has it: SGD lr 0.002, momentum 0.9, weight
decay 5e-4, `warmup_epochs` local epoch(s) at the constant `warmup_lr` 1e-5, then cosine
decay over the rest of the client-round; fresh each client-round, so the warm-up opens
every client-round, and with a single local epoch it is skipped (`benchmark.optim`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range, first
from benchmark.method_registration import register_method
from benchmark.optim import sgd_with_cosine
from benchmark.prompts import ContextPrompts


@register_method("promptfl")
class PromptFL(FederatedMethod):
    """CoOp context [n_ctx, text width] ~ N(0, 0.02), uploaded whole each round."""

    tunable = {"lr": LogUniform.around(0.002)}  # around the paper's lr, the default below
    lr_schedule = (
        "SGD, warmup_epochs local epochs at warmup_lr (none with 1 local epoch), then cosine from lr to 0 over "
        "the rest of each client-round's steps (CoOp's recipe, restarted every round)"
    )
    ranges = {
        **OPTIMIZER_RANGES,
        "n_ctx": Range(ge=1),
        "init_std": Range(ge=0),
        "warmup_epochs": Range(ge=0),
        "warmup_lr": Range(gt=0),
    }
    upload_keys = ("ctx",)
    frozen_image_features = True
    batched_training = True

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        init_std: float = 0.02,
        lr: float = 0.002,
        warmup_epochs: int = 1,
        warmup_lr: float = 1e-5,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        """Args:
        n_ctx: number of learned context vectors before the class name (CoOp: 16).
        init_std: standard deviation of the context's normal initialization.
        lr: SGD learning rate after the warm-up, decayed by a cosine over the client-round.
        warmup_epochs: local epochs at the constant warmup_lr first (skipped with one local epoch).
        warmup_lr: the warm-up learning rate.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        """
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        self.ctx = nn.Parameter(torch.randn(n_ctx, backbone.text.width) * init_std)

    def encode_classes(self, class_names):
        return self.encode_class_inputs(first(self.class_inputs([class_names])))

    def class_inputs(self, class_lists):
        return self.prompts.layouts(class_lists)

    def encode_class_inputs(self, inputs):
        return F.normalize(self.prompts.encode_layout(self.ctx, *inputs), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_with_cosine(self, [self.ctx], hp.lr, hp.momentum, hp.weight_decay, hp.warmup_epochs, hp.warmup_lr)
