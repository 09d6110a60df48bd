"""FedTPG: a prompt translator turns the client's class names into one shared text prompt.

Qiu et al., "Text-driven Prompt Generation for Vision-Language Models in Federated
Learning" (ICLR 2024). The trainable module maps the *set* of candidate class names to
n_ctx context vectors that every class's prompt uses:

    c_k = normalize(CLIP_text("{name_k}"))          bare class name, no template, frozen
    a   = MHA(LN_q(Q), LN_c(c), LN_c(c))            Q: n_ctx learnable queries [n_ctx, W]
    P   = a + FFN(a)                                FFN = LN -> Linear W->8W -> GEGLU -> Linear 4W->W
    t_k = CLIP_text("[SOS] P_1..P_n {name_k}.")     the context replaces the n placeholders
    logits = scale * normalize(f) . normalize(t)^T   f: the frozen CLIP image feature

There is no residual from the queries to the attention output (the authors' translator);
the same normalized context is key and value. P depends on the whole class set, not on
the image, so it is computed once per class set and the image side can be cached. At
evaluation the class set is the one scored (a client's classes, the base or the novel
classes), which is how the translator generalizes to unseen classes.

Everything trainable is uploaded and averaged; nothing is personal. The authors keep the
translator in fp16; here it follows the run's precision. Defaults are the authors'
harness: 4 context vectors, 4 heads, SGD lr 0.003, momentum 0.9, weight decay 1e-5, and
the harness's per-client cosine over rounds: each client-round runs at one lr, which falls
from 0.003 towards 0 with the rounds the client has trained in
(`benchmark.optim.sgd_per_client_cosine`, as for FedMVP and the harness's baselines).
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range, first
from benchmark.method_registration import register_method
from benchmark.optim import PER_CLIENT_COSINE, sgd_per_client_cosine
from benchmark.prompts import ContextPrompts


class GEGLU(nn.Module):
    """x -> a * gelu(g), with [a, g] the two halves of the last dimension."""

    def forward(self, x: Tensor) -> Tensor:
        a, gate = x.chunk(2, dim=-1)
        return a * F.gelu(gate)


class PromptTranslator(nn.Module):
    """n_ctx learnable queries cross-attend over class-name embeddings, then a feed-forward."""

    def __init__(self, width: int, context_dim: int, n_ctx: int, heads: int, ff_mult: int, init_std: float) -> None:
        super().__init__()
        self.queries = nn.Parameter(torch.randn(n_ctx, width) * init_std)
        self.norm_queries = nn.LayerNorm(width)
        self.norm_context = nn.LayerNorm(context_dim)
        self.attention = nn.MultiheadAttention(width, heads, kdim=context_dim, vdim=context_dim, batch_first=True)
        self.feed_forward = nn.Sequential(
            nn.LayerNorm(width),
            nn.Linear(width, width * ff_mult * 2),
            GEGLU(),
            nn.Linear(width * ff_mult, width),
        )

    def forward(self, context: Tensor) -> Tensor:
        """context [C, context_dim] -> prompt [n_ctx, width]."""
        queries = self.norm_queries(self.queries).unsqueeze(0)
        context = self.norm_context(context).unsqueeze(0)
        attended, _ = self.attention(queries, context, context, need_weights=False)
        attended = attended[0]
        return attended + self.feed_forward(attended)


@register_method("fedtpg")
class FedTPG(FederatedMethod):
    """Prompt translator over the class-name embeddings; uploaded whole, plain global model."""

    tunable = {"lr": LogUniform.around(0.003)}  # around the paper's lr, the default below
    lr_schedule = PER_CLIENT_COSINE
    ranges = {
        **OPTIMIZER_RANGES,
        "n_ctx": Range(ge=1),
        "heads": Range(ge=1),
        "ff_mult": Range(ge=1),
        "init_std": Range(ge=0),
    }
    upload_keys = ("translator.*",)
    batched_training = True
    frozen_image_features = True  # only the text side learns

    def __init__(
        self,
        backbone: Backbone,
        n_ctx: int = 4,
        heads: int = 4,
        ff_mult: int = 4,
        init_std: float = 0.02,
        lr: float = 0.003,
        momentum: float = 0.9,
        weight_decay: float = 1e-5,
    ) -> None:
        super().__init__(backbone)
        width = backbone.text.width
        if width % heads:
            raise ValueError(f"heads must divide the text width {width} of {backbone.name!r}, got {heads}")
        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, n_ctx)
        self.translator = PromptTranslator(width, backbone.embed_dim, n_ctx, heads, ff_mult, init_std)
        self._names: dict[tuple, Tensor] = {}  # frozen class-name embeddings: a cache, not client state

    def class_name_embeddings(self, class_names: Sequence[str]) -> Tensor:
        """normalize(CLIP_text(name)) [C, D] of the bare names, frozen."""
        key = (tuple(class_names), str(self.device))
        if key not in self._names:
            with torch.no_grad():
                tokens = self.backbone.tokenize(list(class_names))
                self._names[key] = F.normalize(self.backbone.encode_text(tokens), dim=-1)
        return self._names[key]

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        return self.encode_class_inputs(first(self.class_inputs([class_names])))

    def class_inputs(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor, ...]:
        """The frozen name embeddings and the prompt layout of each list, stacked."""
        names = torch.stack([self.class_name_embeddings(class_names) for class_names in class_lists])
        return (names, *self.prompts.layouts(class_lists))

    def encode_class_inputs(self, inputs: tuple[Tensor, ...]) -> Tensor:
        names, *layout = inputs
        return F.normalize(self.prompts.encode_layout(self.translator(names), *layout), dim=-1)

    def configure_optimizers(self):
        hp = self.hparams
        return sgd_per_client_cosine(self, self.translator.parameters(), hp.lr, hp.momentum, hp.weight_decay)
