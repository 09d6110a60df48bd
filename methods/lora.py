"""CLIP-LoRA, federated with sample-weighted FedAvg of all LoRA weights (a global method).

Zanella & Ben Ayed, "Low-Rank Few-Shot Adaptation of Vision-Language Models" (CVPR 2024
workshops); defaults from docs/methods.md and the authors' code (`loralib/layers.py`,
`lora.py`): LoRA on q, k and v of every block of both towers, rank 2, alpha 1, scaling
alpha / sqrt(r) (their code comments out loralib's alpha / r), A kaiming-uniform with
a = sqrt(5) as nn.Linear, B zeros, dropout 0.25 on the LoRA input of each projection (in
training only); AdamW lr 2e-4, weight decay 1e-2, betas (0.9, 0.999), cosine to 1e-6 over
the local steps. ViT-B/16: 12 blocks x 3 x r (W + W) per tower = 73,728 (text) + 110,592
(vision) = 184,320 trainable parameters, all uploaded. No official federated version
exists: this is FedAvg of all LoRA weights, every client receives the average.

open_clip's blocks use nn.MultiheadAttention with one fused in_proj_weight [3W, W], so
a LoRA block is a block wrapper that recomputes the block with the low-rank updates
(`LoRABlock.forward`), never touching the shared frozen model.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone
from benchmark.method import FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method

TOWERS = ("text", "vision")


class LoRAProjection(nn.Module):
    """The low-rank update of one projection: x -> scaling * B A dropout(x)."""

    def __init__(self, width: int, rank: int, scaling: float, dropout: float) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, width))
        self.B = nn.Parameter(torch.zeros(width, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # as nn.Linear's weight
        self.scaling = scaling
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.scaling * F.linear(F.linear(self.dropout(x), self.A), self.B)


class LoRABlock(nn.Module):
    """Block wrapper: an open_clip ResidualAttentionBlock with LoRA on q, k and v.

    x + ls_1(out_proj(attention(q, k, v))) with q = ln_1(x) W_q^T + b_q + LoRA_q(ln_1(x)),
    and k, v likewise; then x + ls_2(mlp(ln_2(x))). attn_mask is the block's additive mask
    (causal for the text tower, None for the image tower)."""

    def __init__(self, width: int, rank: int, scaling: float, dropout: float) -> None:
        super().__init__()
        self.q = LoRAProjection(width, rank, scaling, dropout)
        self.k = LoRAProjection(width, rank, scaling, dropout)
        self.v = LoRAProjection(width, rank, scaling, dropout)

    def forward(self, block: nn.Module, x: Tensor, attn_mask: Tensor | None) -> Tensor:
        attn = block.attn
        h = block.ln_1(x)
        weights = attn.in_proj_weight.chunk(3)
        biases = attn.in_proj_bias.chunk(3) if attn.in_proj_bias is not None else (None, None, None)
        q, k, v = (F.linear(h, w, b) + lora(h) for w, b, lora in zip(weights, biases, (self.q, self.k, self.v)))
        batch, length, width = q.shape
        heads = attn.num_heads

        def split(t: Tensor) -> Tensor:  # [B, L, W] -> [B, heads, L, W / heads]
            return t.view(batch, length, heads, width // heads).transpose(1, 2)

        mask = attn_mask.to(q.dtype) if attn_mask is not None else None
        mixed = F.scaled_dot_product_attention(split(q), split(k), split(v), attn_mask=mask)
        mixed = mixed.transpose(1, 2).reshape(batch, length, width)
        x = x + block.ls_1(attn.out_proj(mixed))
        return x + block.ls_2(block.mlp(block.ln_2(x)))


@register_method("lora")
class CLIPLoRA(FederatedMethod):
    """LoRA on q, k, v of all blocks of both towers; every LoRA weight is FedAvg'd."""

    tunable = {"lr": LogUniform.around(2e-4)}  # around the paper's lr, the default below
    lr_schedule = "AdamW, cosine from lr to min_lr over each client-round's local steps (restarted every round)"
    ranges = {
        "rank": Range(ge=1),
        "dropout": Range(ge=0, lt=1),
        "lr": Range(gt=0),
        "weight_decay": Range(ge=0),
        "min_lr": Range(ge=0),
    }
    upload_keys = ("lora.*",)
    frozen_image_features = False  # the image tower carries LoRA too
    gpu_precision = "32-true"  # early LoRA updates are smaller than bf16's matmul noise (docs/performance.md)

    def __init__(
        self,
        backbone: Backbone,
        rank: int = 2,
        alpha: float = 1.0,
        dropout: float = 0.25,
        lr: float = 2e-4,
        weight_decay: float = 1e-2,
        min_lr: float = 1e-6,
        template: str = "a photo of a {}.",
    ) -> None:
        super().__init__(backbone)
        if "{}" not in template:
            raise ValueError(f"template must contain '{{}}' where the class name goes, got {template!r}")
        self.save_hyperparameters(ignore=["backbone"])
        scaling = alpha / math.sqrt(rank)  # CLIP-LoRA's choice, not loralib's alpha / r
        self.lora = nn.ModuleDict(
            {
                tower: nn.ModuleList(LoRABlock(shape.width, rank, scaling, dropout) for _ in range(shape.blocks))
                for tower, shape in (("text", backbone.text), ("vision", backbone.vision))
            }
        )
        self._tokens: dict[tuple[str, ...], Tensor] = {}

    @property
    def scaling(self) -> float:
        return self.hparams.alpha / math.sqrt(self.hparams.rank)

    def block_wrappers(self, tower: str) -> dict[int, LoRABlock]:
        return dict(enumerate(self.lora[tower]))

    def encode_images(self, images: Tensor) -> Tensor:
        return F.normalize(self.backbone.encode_image(images, self.block_wrappers("vision")), dim=-1)

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        key = tuple(class_names)
        if key not in self._tokens:  # the prompts are fixed: tokenize once per class list
            self._tokens[key] = self.backbone.tokenize([self.hparams.template.format(c) for c in class_names])
        tokens = self._tokens[key].to(self.device)
        return F.normalize(self.backbone.encode_text(tokens, block_wrappers=self.block_wrappers("text")), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        optimizer = torch.optim.AdamW(
            self.lora.parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=(0.9, 0.999)
        )
        steps = max(1, int(self.trainer.estimated_stepping_batches))
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps, eta_min=hp.min_lr)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
