"""FedCoCoOp: CoCoOp's image-conditioned context, federated.

Zhou et al., "Conditional Prompt Learning for Vision-Language Models" (CVPR 2022), as the
baseline of the FedTPG/FedMVP papers. No federated implementation is public; this is the
original module in the federated harness. For an image with normalized CLIP feature f:

    pi    = meta_net(f)                 Linear D -> D/16, ReLU, Linear D/16 -> W
    ctx_b = ctx + pi                    the same bias on all n_ctx context vectors
    t_bk  = CLIP_text("[SOS] ctx_b {name_k}.")
    logit_bk = scale * f_b . normalize(t_bk)

so every image has its own class features: B x C text-encoder passes per batch. The class
features therefore cannot be computed without the image; `encode_classes` returns the
class names and `classify` builds the per-image prompts (training and evaluation alike).

ctx starts from the embeddings of "a photo of a" (the official base-to-new config);
`ctx_init: ""` draws N(0, init_std) instead. The class-dependent token embeddings are
recomputed from each client's own class names and never stored in the state, so what is
uploaded and averaged is exactly ctx and the meta-net. Optimizer: the federated harness's
SGD lr 0.003, momentum 0.9, weight decay 1e-5, with its per-client cosine over rounds
(`benchmark.optim.sgd_per_client_cosine`; FedMVP's settings for this baseline are not
published).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, full_precision
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from benchmark.prompts import ContextPrompts

# Image-conditioned prompts are encoded in chunks of at most this many (image, class)
# pairs, so a 256-image evaluation batch over many classes does not hold them all at once.
MAX_PROMPTS_PER_PASS = 4096


@register_method("fedcocoop")
class FedCoCoOp(FederatedMethod):
    """ctx + meta-net bias from the image feature; both uploaded, plain global model."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = {**OPTIMIZER_RANGES, "n_ctx": Range(ge=1), "reduction": Range(ge=1), "init_std": Range(ge=0)}
    upload_keys = ("ctx", "meta_net.*")
    frozen_image_features = True  # the meta-net reads the frozen CLIP feature

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 4,
        ctx_init: str = "a photo of a",
        reduction: int = 16,
        init_std: float = 0.02,
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        dim, width = backbone.embed_dim, backbone.text.width
        if dim // reduction < 1:
            raise ValueError(f"reduction must be between 1 and the feature dimension {dim}, got {reduction}")
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx, ctx_init)
        initial = self.prompts.initial_context() if ctx_init else torch.randn(n_ctx, width) * init_std
        self.ctx = nn.Parameter(initial.float())
        self.meta_net = nn.Sequential(nn.Linear(dim, dim // reduction), nn.ReLU(), nn.Linear(dim // reduction, width))

    def encode_classes(self, class_names: Sequence[str]) -> tuple[str, ...]:
        return tuple(class_names)  # the prompts need the image: built in `classify`

    def classify(self, image_features: Tensor, class_features: tuple[str, ...]) -> Tensor:
        num_classes = len(class_features)
        step = max(1, MAX_PROMPTS_PER_PASS // num_classes)
        logits = []
        device = image_features.device.type
        for start in range(0, len(image_features), step):
            f = image_features[start : start + step].float()
            with full_precision(device):  # the meta-net and the logits in fp32; the tower may autocast
                ctx = self.ctx + self.meta_net(f).unsqueeze(1)  # [b, n_ctx, W]
            ctx = ctx.unsqueeze(1).expand(-1, num_classes, -1, -1)  # [b, C, n_ctx, W]
            text = self.prompts.encode(ctx, class_features)  # [b, C, D]
            with full_precision(device):
                logits.append(torch.einsum("bd,bcd->bc", f, F.normalize(text.float(), dim=-1)))
        return self.backbone.logit_scale * torch.cat(logits)

    def configure_optimizers(self):
        hp = self.hparams
        params = [self.ctx, *self.meta_net.parameters()]
        return sgd_per_client_cosine(self, params, hp.lr, hp.momentum, hp.weight_decay)
