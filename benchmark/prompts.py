"""CoOp-style prompts: learned context vectors spliced into a class-name prompt.

`[SOS][ctx_1 .. ctx_n][class name tokens][.][EOS]`: the class names are tokenized once
as "X X .. X {name}." and the n placeholder embeddings are replaced by the context.
With a `text` ("a photo of a"), the prompt is "{text} {name}." and the context replaces
the first n tokens of `text` (MaPLe: n = 2 replaces "a photo", "of a" stays fixed);
`initial_context()` gives those tokens' embeddings, CoOp's "ctx_init".
The token layout depends only on the frozen backbone and the class names, so it is
cached per class list; nothing client-specific lives here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from benchmark.backbone import Backbone, BlockWrapper, BlockWrappers
from benchmark.backbone_weights import BackboneError


@dataclass(frozen=True)
class PromptLayout:
    tokens: Tensor  # [C, L], marks where each prompt ends
    prefix: Tensor  # [C, 1, W] the SOS embedding
    suffix: Tensor  # [C, L - 1 - n_ctx, W] class name, ".", EOS, padding


class ContextPrompts:
    def __init__(self, backbone: Backbone, n_ctx: int, text: str = "") -> None:
        self.backbone = backbone
        self.n_ctx = n_ctx
        self.text = text or " ".join(["X"] * n_ctx)
        words = self.backbone.tokenize([self.text])[0]
        available = int(words.argmax()) - 1  # tokens between SOS and EOT
        if available < n_ctx:
            raise ValueError(
                f"the prompt text {self.text!r} has {available} tokens, fewer than the {n_ctx} context "
                "vectors that replace its first tokens; use a longer text or fewer context vectors"
            )
        self._layouts: dict[tuple[str, ...], PromptLayout] = {}

    def init_string(self, class_name: str) -> str:
        return f"{self.text} {class_name}."

    @torch.no_grad()
    def initial_context(self) -> Tensor:
        """The token embeddings [n_ctx, W] the context replaces (a copy, for initialisation)."""
        tokens = self.backbone.tokenize([self.text])
        return self.backbone.token_embedding(tokens)[0, 1 : 1 + self.n_ctx].clone()

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

    def layouts(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor, Tensor]:
        """(tokens, prefix, suffix) of each class list's layout stacked along a leading
        dimension, cut to the positions the text tower runs (up to the longest prompt of all
        lists, `text_length`): frozen inputs of `encode_layout`."""
        layouts = [self.layout(names) for names in class_lists]
        length = max(self.backbone.text_length(layout.tokens) for layout in layouts)
        keep = length - 1 - self.n_ctx
        return (
            torch.stack([layout.tokens[:, :length] for layout in layouts]),
            torch.stack([layout.prefix for layout in layouts]),
            torch.stack([layout.suffix[:, :keep] for layout in layouts]),
        )

    def encode(self, ctx: Tensor, class_names: Sequence[str], block_wrappers: BlockWrappers | None = None) -> Tensor:
        """Text features for context `ctx`: [n_ctx, W] shared by all classes or [C, n_ctx, W]
        per class give [C, D]; [B, C, n_ctx, W] (one context per image, CoCoOp) gives [B, C, D]."""
        return self.encode_layout(ctx, *(t[0] for t in self.layouts([class_names])), block_wrappers)

    def encode_layout(
        self, ctx: Tensor, tokens: Tensor, prefix: Tensor, suffix: Tensor, block_wrappers: BlockWrappers | None = None
    ) -> Tensor:
        """`encode` from one class list's row of `layouts`; no data-dependent Python (it runs
        under `torch.func.vmap` when clients train in one pass)."""
        num_classes = tokens.shape[0]
        if ctx.dim() == 2:
            ctx = ctx.unsqueeze(0).expand(num_classes, -1, -1)
        per_image = ctx.dim() == 4
        rows = ctx.shape[0] if per_image else 1
        ctx = ctx.reshape(rows * num_classes, *ctx.shape[-2:])
        tokens, prefix, suffix = tokens.to(ctx.device), prefix.to(ctx.device), suffix.to(ctx.device)
        if per_image:
            prefix, suffix, tokens = (t.repeat(rows, *([1] * (t.dim() - 1))) for t in (prefix, suffix, tokens))
        embeddings = torch.cat([prefix, ctx.to(prefix.dtype), suffix], dim=1)
        x = self.backbone.embedded_text(embeddings)
        features = self.backbone.encode_text_stream(x, tokens.argmax(dim=-1), block_wrappers)
        return features.reshape(rows, num_classes, -1) if per_image else features


def deep_prompt(prompt: Tensor, first: int) -> BlockWrapper:
    """A block wrapper for deep prompts (VPT, MaPLe): the block input's tokens first ..
    first + n - 1 (a negative `first` counts from the end) are replaced by `prompt`
    ([n, W], or [B, n, W] per sample) before the block runs."""
    n = prompt.shape[-2]

    def wrapper(block, x: Tensor, attn_mask: Tensor | None) -> Tensor:
        start = first if first >= 0 else x.shape[1] + first
        if not 0 <= start <= x.shape[1] - n:
            raise ValueError(f"deep prompt of {n} tokens at {first} does not fit a sequence of {x.shape[1]}")
        p = prompt.to(x.dtype).expand(x.shape[0], -1, -1) if prompt.dim() == 2 else prompt.to(x.dtype)
        return block(torch.cat([x[:, :start], p, x[:, start + n :]], dim=1), attn_mask=attn_mask)

    return wrapper


class FixedClassTexts:
    """Normalized features of a fixed template ("a photo of a {}.") per class list, for
    methods that train nothing on the text side. The text tower is frozen, so each
    (class list, device) is encoded once; a cache, never client state."""

    def __init__(self, backbone: Backbone, template: str) -> None:
        self.backbone = backbone
        self.template = template
        self._features: dict[tuple, Tensor] = {}

    def __call__(self, class_names: Sequence[str], device: torch.device) -> Tensor:
        key = (tuple(class_names), str(device))
        if key not in self._features:
            text = self.backbone.zero_shot_text_features(class_names, self.template)
            self._features[key] = torch.nn.functional.normalize(text, dim=-1)
        return self._features[key]

    def stacked(self, class_lists: Sequence[Sequence[str]], device: torch.device) -> tuple[Tensor]:
        """`class_inputs` of a method whose class features are these: the features of each
        list stacked (its `encode_class_inputs` returns its row as it is)."""
        return (torch.stack([self(names, device) for names in class_lists]),)


class FrozenClassTexts:
    """The three class hooks of a method whose class features are a fixed template's through
    the frozen text tower (CLIP-Adapter, FedCLIP, FedVPT): list it before `FederatedMethod`
    (`class M(FrozenClassTexts, FederatedMethod)`) and set `self._text = FixedClassTexts(
    backbone, template)` in `__init__`. One copy, so the three cannot drift apart."""

    _text: FixedClassTexts
    device: torch.device  # the LightningModule's

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        return self._text(class_names, self.device)

    def class_inputs(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor]:
        return self._text.stacked(class_lists, self.device)

    def encode_class_inputs(self, inputs: tuple[Tensor]) -> Tensor:
        return inputs[0]  # the text is frozen: the features themselves
