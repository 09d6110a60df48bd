"""FedVPT: deep visual prompt tuning, federated.

Jia et al., "Visual Prompt Tuning" (ECCV 2022), in the deep form of the MaPLe
repository's VPT baseline, as the FedMVP paper's "FedVPT" (no federated implementation is
public; FedMVP's depth and token count are not published). With n prompt tokens per
prompted block:

    x_0 = ln_pre([CLS, patches] + pos  ||  prompts_0)    the prompts get no position
    x_i = block_i(x_{i-1}[:, :-n] || prompts_i)          blocks 1 .. depth-1: replaced
    x_i = block_i(x_{i-1})                               deeper blocks carry them on
    f   = normalize(ln_post(x_L)[:, 0] @ proj)

The text side is fixed: CLIP's "a photo of a {name}." features. `depth` is the number of
blocks with their own prompts: 0 (default) = every block of the image tower, which is 12
on ViT-B/16 (12 x 8 x 768 = 73,728 parameters); 1 is shallow VPT. All prompts are uploaded
and averaged; nothing is personal. Optimizer: the federated harness's SGD lr 0.003,
momentum 0.9, weight decay 1e-5, with its per-client cosine over rounds
(`benchmark.optim.sgd_per_client_cosine`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, BlockWrappers
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from benchmark.prompts import FixedClassTexts, FrozenClassTexts, deep_prompt


@register_method("fedvpt")
class FedVPT(FrozenClassTexts, FederatedMethod):
    """Deep visual prompts [depth, n_ctx, vision width]; uploaded whole, fixed text."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = {**OPTIMIZER_RANGES, "n_ctx": Range(ge=1), "depth": Range(ge=0), "init_std": Range(ge=0)}
    upload_keys = ("prompts",)
    batched_training = True
    frozen_image_features = False  # the prompts change the image tower's output

    @classmethod
    def fit_to_backbone(cls, shape, hyperparameters: dict) -> dict:
        """The prompted depth must fit the image tower."""
        blocks, depth = shape.vision.blocks, hyperparameters["depth"]
        if not 0 <= depth <= blocks:
            raise ValueError(
                f"depth {depth} does not fit backbone {shape.name!r}, whose image tower has {blocks} "
                f"blocks; choose 1..{blocks} prompted blocks (0 = all of them, 1 = shallow VPT)"
            )
        return hyperparameters

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 8,
        depth: int = 0,
        template: str = "a photo of a {}.",
        init_std: float = 0.02,
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        blocks = backbone.vision.blocks
        self.fit_to_backbone(backbone, {"depth": depth})
        if "{}" not in template:
            raise ValueError(f"template must contain '{{}}' where the class name goes, got {template!r}")
        self.save_hyperparameters(ignore=["backbone"])
        depth = depth or blocks
        # prompts[0] enters with the patches; prompts[i] replaces them at the input of block i.
        self.prompts = nn.Parameter(torch.randn(depth, n_ctx, backbone.vision.width) * init_std)
        self._text = FixedClassTexts(backbone, template)

    def block_wrappers(self) -> BlockWrappers:
        return {i: deep_prompt(self.prompts[i], -self.prompts.shape[1]) for i in range(1, self.prompts.shape[0])}

    def encode_images(self, images: Tensor) -> Tensor:
        features = self.backbone.encode_image(images, self.block_wrappers(), prompts=self.prompts[0])
        return F.normalize(features, dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_per_client_cosine(self, [self.prompts], hp.lr, hp.momentum, hp.weight_decay)
