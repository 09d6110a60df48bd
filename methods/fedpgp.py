"""FedPGP: a CoOp context split into a global part and a personal low-rank part.

Cui et al., "Harmonizing Generalization and Personalization in Federated Prompt
Learning" (ICML 2024); behaviour from docs/methods.md and the authors' trainers/fedpgp.py.
ctx = U V + sigma with sigma [16, W] global (FedAvg by n_i), U [16, r] and V [r, W]
personal. A contrastive term keeps the global part close to the hand-written anchor
prompt and away from the personalized prompt.

One prompt set (N = 1): the authors' N = 2 concatenates 2C logit columns while labels
index only the first C, which is a bug, not a design.

Optimizer: the authors' recipe (federated_main.py, configs/trainers/PLOT/vit_b16.yaml):
SGD lr 0.001 with Dassl's momentum 0.9 and weight decay 5e-4; "single_step" with gamma 1
is a constant lr. mu = 0.5 and r = 8 are the spec's defaults (the authors' argparse
defaults are mu = 1 and bottleneck 4).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.prompts import ContextPrompts


def contrastive_loss(anchor: Tensor, global_only: Tensor, full: Tensor, temperature: float) -> Tensor:
    """CE over the 2-way logits [cos(anchor, sigma), cos(sigma, sigma + UV)] / tau with target
    0 (the positive pair), one row per class, averaged over classes. Features [C, D]."""
    positive = F.cosine_similarity(anchor, global_only, dim=-1)
    negative = F.cosine_similarity(global_only, full, dim=-1)
    logits = torch.stack([positive, negative], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(logits), dtype=torch.long, device=logits.device))


@register_method("fedpgp")
class FedPGP(FederatedMethod):
    """sigma uploaded and averaged; U, V personal; CE + mu * contrastive loss."""

    tunable = {"lr": LogUniform.around(0.001)}  # around the paper's lr, the default below
    lr_schedule = "SGD at a constant lr (the authors' single_step, gamma 1); a fresh optimizer every client-round"
    ranges = {
        **OPTIMIZER_RANGES,
        "n_ctx": Range(ge=1),
        "rank": Range(ge=1),
        "init_std": Range(ge=0),
        "temperature": Range(gt=0),
    }
    upload_keys = ("sigma",)
    frozen_image_features = True

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 16,
        rank: int = 8,
        init_std: float = 0.02,
        mu: float = 0.5,
        temperature: float = 0.5,
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        width = backbone.text.width
        self.U = nn.Parameter(torch.randn(n_ctx, rank) * init_std)
        self.V = nn.Parameter(torch.randn(rank, width) * init_std)
        self.sigma = nn.Parameter(torch.randn(n_ctx, width) * init_std)
        self._anchors: dict[tuple, Tensor] = {}  # frozen features: a cache, not client state

    def context(self) -> Tensor:
        """The personalized context U V + sigma [n_ctx, W]."""
        return self.U @ self.V + self.sigma

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        return F.normalize(self.prompts.encode(self.context(), class_names), dim=-1)

    def anchor_features(self, class_names: Sequence[str]) -> Tensor:
        """Frozen normalized text features of the init strings "X X .. X {name}." [C, D]."""
        key = (tuple(class_names), str(self.device))
        if key not in self._anchors:
            tokens = self.prompts.layout(class_names).tokens.to(self.device)
            with torch.no_grad():
                self._anchors[key] = F.normalize(self.backbone.encode_text(tokens), dim=-1)
        return self._anchors[key]

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, labels = batch
        names = list(self.current_client.class_names)
        num_classes = len(names)
        # One text-tower pass: C full prompts (sigma + UV), then C global-only prompts (sigma).
        ctx = torch.cat([self.context().expand(num_classes, -1, -1), self.sigma.expand(num_classes, -1, -1)])
        features = F.normalize(self.prompts.encode(ctx, names + names), dim=-1)
        full, global_only = features[:num_classes], features[num_classes:]
        ce = F.cross_entropy(self.classify(self.image_features(inputs), full), labels)
        contrastive = contrastive_loss(self.anchor_features(names), global_only, full, self.hparams.temperature)
        loss = ce + self.hparams.mu * contrastive
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=len(labels))
        return loss

    def configure_optimizers(self):
        hp = self.hparams
        params = [self.sigma, self.U, self.V]
        return torch.optim.SGD(params, lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
