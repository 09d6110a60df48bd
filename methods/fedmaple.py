"""FedMaPLe: MaPLe's coupled text and visual prompts, federated.

Khattak et al., "MaPLe: Multi-modal Prompt Learning" (CVPR 2023), as the FedMVP paper's
"FedMaPLe" baseline (no federated implementation is public). With n = n_ctx tokens and
prompt depth J (blocks 0 .. J-1 get prompts in both towers):

  text    "[SOS] ctx {rest of ctx_init} {name}." + pos   ctx = the first n tokens of ctx_init,
                                                          so the layer-0 ctx *does* get positions
          input of text block i = 1..J-1: tokens 1..n := text_prompts[i-1]
  vision  ln_pre([CLS, patches] + pos || proj(ctx))       the vision prompts get no position
          input of vision block i = 1..J-1: last n tokens := projections[i-1](text_prompts[i-1])
  logits = scale * normalize(f) . normalize(t)^T

The vision prompts are functions of the text prompts (the "coupling"), so the two towers
share what they learn. Defaults are the MaPLe repository's base-to-new config: n_ctx 2,
ctx_init "a photo of a" (the prompt reads "[ctx1][ctx2] of a {name}."), depth 9 of 12
blocks (on ViT-B/16: 3,555,072 parameters). A backbone with fewer blocks needs a smaller
`depth` (the toy CLIP has 4; its preset uses 3). Everything is uploaded and averaged;
nothing is personal. The deep projections start as copies of one Linear (MaPLe's
`_get_clones`); the layer-0 `proj` is drawn on its own. Optimizer: the federated harness's SGD lr 0.003, momentum 0.9,
weight decay 1e-5, with its per-client cosine over rounds
(`benchmark.optim.sgd_per_client_cosine`).
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, BlockWrappers
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range, first
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from benchmark.prompts import ContextPrompts, deep_prompt


@register_method("fedmaple")
class FedMaPLe(FederatedMethod):
    """Text context + deep text prompts, coupled to the image tower by Linear maps; all uploaded."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = {**OPTIMIZER_RANGES, "n_ctx": Range(ge=1), "depth": Range(ge=1), "init_std": Range(ge=0)}
    upload_keys = ("*",)
    batched_training = True
    frozen_image_features = False  # the coupled prompts change the image tower's output

    @classmethod
    def fit_to_backbone(cls, shape, hyperparameters: dict) -> dict:
        """The prompted depth must fit the shallower tower."""
        blocks, depth = min(shape.text.blocks, shape.vision.blocks), hyperparameters["depth"]
        if not 1 <= depth <= blocks:
            raise ValueError(
                f"depth {depth} does not fit backbone {shape.name!r} (text tower {shape.text.blocks} "
                f"blocks, image tower {shape.vision.blocks}); choose --depth between 1 and {blocks} "
                "(MaPLe prompts the first 9 of ViT-B/16's 12 blocks)"
            )
        return hyperparameters

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 2,
        ctx_init: str = "a photo of a",
        depth: int = 9,
        init_std: float = 0.02,
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        self.fit_to_backbone(backbone, {"depth": depth})
        self.save_hyperparameters(ignore=["backbone"])
        text_width, vision_width = backbone.text.width, backbone.vision.width
        self.prompts = ContextPrompts(backbone, n_ctx, ctx_init)
        initial = self.prompts.initial_context() if ctx_init else torch.randn(n_ctx, text_width) * init_std
        self.ctx = nn.Parameter(initial.float())
        self.proj = nn.Linear(text_width, vision_width)
        # text_prompts[i - 1] and projections[i - 1] feed block i = 1 .. depth - 1 of each tower.
        self.text_prompts = nn.Parameter(torch.randn(depth - 1, n_ctx, text_width) * init_std)
        # MaPLe draws one Linear and deep-copies it for every deep block, so the deep
        # projections start identical (and then train apart).
        single = nn.Linear(text_width, vision_width)
        self.projections = nn.ModuleList(copy.deepcopy(single) for _ in range(depth - 1))

    def text_block_wrappers(self) -> BlockWrappers:
        return {i + 1: deep_prompt(p, 1) for i, p in enumerate(self.text_prompts)}

    def vision_block_wrappers(self) -> BlockWrappers:
        n = self.hparams.n_ctx
        return {i + 1: deep_prompt(proj(p), -n) for i, (p, proj) in enumerate(zip(self.text_prompts, self.projections))}

    def encode_images(self, images: Tensor) -> Tensor:
        features = self.backbone.encode_image(images, self.vision_block_wrappers(), prompts=self.proj(self.ctx))
        return F.normalize(features, dim=-1)

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        return self.encode_class_inputs(first(self.class_inputs([class_names])))

    def class_inputs(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor, Tensor]:
        return self.prompts.layouts(class_lists)

    def encode_class_inputs(self, inputs: tuple[Tensor, Tensor, Tensor]) -> Tensor:
        return F.normalize(self.prompts.encode_layout(self.ctx, *inputs, self.text_block_wrappers()), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_per_client_cosine(self, self.parameters(), hp.lr, hp.momentum, hp.weight_decay)
