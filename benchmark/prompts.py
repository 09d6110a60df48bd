"""CoOp-style prompts: learned context vectors spliced into a class-name prompt.

`[SOS][ctx_1 .. ctx_n][class name tokens][.][EOS]`: the class names are tokenized once
as "X X .. X {name}." and the n placeholder embeddings are replaced by the context.
The token layout depends only on the frozen backbone and the class names, so it is
cached per class list; nothing client-specific lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from benchmark.backbone import Backbone, BackboneError, BlockWrappers


@dataclass(frozen=True)
class PromptLayout:
    tokens: Tensor  # [C, L], marks where each prompt ends
    prefix: Tensor  # [C, 1, W] the SOS embedding
    suffix: Tensor  # [C, L - 1 - n_ctx, W] class name, ".", EOS, padding


class ContextPrompts:
    def __init__(self, backbone: Backbone, n_ctx: int) -> None:
        self.backbone = backbone
        self.n_ctx = n_ctx
        self._layouts: dict[tuple[str, ...], PromptLayout] = {}

    def init_string(self, class_name: str) -> str:
        return " ".join(["X"] * self.n_ctx) + f" {class_name}."

    def layout(self, class_names: Sequence[str]) -> PromptLayout:
        key = tuple(class_names)
        if key not in self._layouts:
            prompts = [self.init_string(c) for c in class_names]
            tokens = self.backbone.tokenize(prompts)
            too_long = [p for p, t in zip(prompts, tokens) if t[-1] != 0]
            if too_long:
                raise BackboneError(
                    f"prompt {too_long[0]!r} does not fit the backbone's context length "
                    f"{self.backbone.context_length}; use fewer context tokens"
                )
            with torch.no_grad():
                embedded = self.backbone.token_embedding(tokens)
            self._layouts[key] = PromptLayout(tokens, embedded[:, :1], embedded[:, 1 + self.n_ctx :])
        return self._layouts[key]

    def encode(
        self, ctx: Tensor, class_names: Sequence[str], block_wrappers: BlockWrappers | None = None
    ) -> Tensor:
        """Text features [C, D] for context `ctx`: [n_ctx, W] shared by all classes or
        [C, n_ctx, W] per class."""
        layout = self.layout(class_names)
        num_classes = len(class_names)
        if ctx.dim() == 2:
            ctx = ctx.unsqueeze(0).expand(num_classes, -1, -1)
        prefix, suffix = layout.prefix.to(ctx.device), layout.suffix.to(ctx.device)
        embeddings = torch.cat([prefix, ctx.to(prefix.dtype), suffix], dim=1)
        return self.backbone.encode_text(layout.tokens.to(ctx.device), embeddings, block_wrappers)
