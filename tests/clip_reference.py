"""CLIP's two towers written out from open_clip's raw modules, for tests that check a
method's forward against an independent computation (never through `benchmark.backbone`
or `benchmark.prompts`). Prompts are spliced in exactly where the papers put them:

- text: `embeddings` replace the token embeddings; `text_deep[i]` ([n, W]) overwrites
  tokens 1..n at the input of text block i (MaPLe);
- image: `visual_prompts` ([n, W]) are appended after the positional embedding and before
  ln_pre; `visual_deep[i]` ([n, W]) overwrites the last n tokens at the input of block i
  (VPT, MaPLe).
"""

from __future__ import annotations

import open_clip
import torch
import torch.nn.functional as F
from torch import Tensor

TINY = "fedbench-tiny-vit"


def tokenize(texts: list[str]) -> Tensor:
    return open_clip.get_tokenizer(TINY)(texts)


def text_features(model, tokens: Tensor, embeddings: Tensor | None = None, text_deep: dict | None = None) -> Tensor:
    x = model.token_embedding(tokens) if embeddings is None else embeddings
    x = x + model.positional_embedding
    for i, block in enumerate(model.transformer.resblocks):
        if text_deep and i in text_deep:
            p = text_deep[i]
            x = torch.cat([x[:, :1], p.expand(x.shape[0], -1, -1), x[:, 1 + p.shape[0] :]], dim=1)
        x = block(x, attn_mask=model.attn_mask)
    x = model.ln_final(x)
    return x[torch.arange(len(tokens)), tokens.argmax(-1)] @ model.text_projection


def prompt_embeddings(model, class_names: list[str], ctx: Tensor, prefix_text: str) -> tuple[Tensor, Tensor]:
    """Tokens and embeddings of "{prefix_text} {name}." with the first len(ctx) tokens after
    SOS replaced by `ctx` ([n, W], or [C, n, W])."""
    tokens = tokenize([f"{prefix_text} {name}." for name in class_names])
    with torch.no_grad():
        embedded = model.token_embedding(tokens)
    n = ctx.shape[-2]
    ctx = ctx.expand(len(class_names), -1, -1) if ctx.dim() == 2 else ctx
    return tokens, torch.cat([embedded[:, :1], ctx, embedded[:, 1 + n :]], dim=1)


def coop_text_features(model, class_names: list[str], ctx: Tensor) -> Tensor:
    """CoOp's prompt "[SOS] ctx {name}.": "X X .. X {name}." with its n X's replaced by `ctx`."""
    tokens, embeddings = prompt_embeddings(model, class_names, ctx, " ".join(["X"] * ctx.shape[-2]))
    return text_features(model, tokens, embeddings)


def image_tokens(
    model, images: Tensor, visual_prompts: Tensor | None = None, visual_deep: dict | None = None
) -> Tensor:
    """ln_post of the image tower's output tokens, [B, 1 + M (+ n), W]."""
    v = model.visual
    x = v.conv1(images)
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    x = torch.cat([v.class_embedding.expand(x.shape[0], 1, -1), x], dim=1) + v.positional_embedding
    if visual_prompts is not None:
        x = torch.cat([x, visual_prompts.expand(x.shape[0], -1, -1)], dim=1)
    x = v.ln_pre(x)
    for i, block in enumerate(v.transformer.resblocks):
        if visual_deep and i in visual_deep:
            p = visual_deep[i]
            x = torch.cat([x[:, : -p.shape[0]], p.expand(x.shape[0], -1, -1)], dim=1)
        x = block(x)
    return v.ln_post(x)


def image_features(model, images: Tensor, **prompts) -> Tensor:
    return image_tokens(model, images, **prompts)[:, 0] @ model.visual.proj


def normalize(x: Tensor) -> Tensor:
    return F.normalize(x, dim=-1)


class BlockInputs:
    """Records the input of every residual block of a tower while active."""

    def __init__(self, blocks) -> None:
        self.inputs: dict[int, Tensor] = {}
        self._handles = [
            block.register_forward_pre_hook(
                lambda module, args, kwargs, i=i: self._keep(i, args, kwargs), with_kwargs=True
            )
            for i, block in enumerate(blocks)
        ]

    def _keep(self, index, args, kwargs):
        x = args[0] if args else kwargs.get("q_x", kwargs.get("x"))
        self.inputs[index] = x.detach().clone()

    def __enter__(self) -> "BlockInputs":
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()


def grads_only_in(method, expected: set[str]) -> None:
    """After a backward pass: exactly the `expected` parameters of the method are trainable,
    each received a non-zero gradient, and nothing in the frozen backbone has one."""
    trainable = {n for n, p in method.named_parameters() if p.requires_grad}
    assert trainable == expected, sorted(trainable ^ expected)
    for name, p in method.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, f"no gradient reached {name}"
    assert all(p.grad is None and not p.requires_grad for p in method.backbone.parameters())
