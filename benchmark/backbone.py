"""The frozen CLIP every method builds on, loaded once per process and shared by all clients.

`load_backbone(name, pretrained)` builds an open_clip model from its config and loads
weights from an open_clip pretrained tag, a local checkpoint file, or a provider that the
suite registers (the toy world's small CLIP). Everything is frozen. The encoders are
re-written here as plain loops over the towers' blocks so that a method can
- feed the text tower token *embeddings* (learned context vectors, CoOp-style),
- read the projected patch tokens of the image tower (FedOTP),
- wrap chosen blocks of either tower with a function that sees the block input
  (pFedMMA's adapters, LoRA, deep prompts that replace tokens between blocks) -- per
  call, without mutating the shared model,
- append visual prompt tokens to the image tower's input sequence (VPT, MaPLe).

Mixed precision. Under autocast (`--precision bf16-mixed`) the blocks' matrix products
run in bf16, but the residual streams of both towers stay in fp32: the embeddings (token,
patch, class, positional, visual prompts) and the pre-norm are computed in fp32, each
block adds its bf16 branch to the fp32 stream (`x + attn(ln_1(x))` promotes to fp32), and
`_run_blocks` refuses a block or wrapper that hands back anything but fp32. The final
projections run in fp32 too. Without this, open_clip's image tower carries a bf16 stream
(its patch embedding is a bf16 convolution, the class and positional embeddings are cast
to it, and its LayerNorm returns the input dtype), and a small term added into the stream
-- pFedMMA's alpha * adapter, alpha = 0.001 -- is rounded away: bf16 resolves 1 part in
256 of a stream of RMS ~1. `tests/core/test_backbone.py` measures what is preserved.

Exact shortcuts (`benchmark.shortcuts`, on unless a run sets `shortcuts: false`). The
text tower runs only up to the batch's longest prompt (its attention is causal: nothing
after a prompt's end-of-text token reaches the feature read there), so a block wrapper on
the text tower sees [B, L', W] with L' <= the context length, and must not count token
positions from the end. The text tower's frozen prefix on fixed tokens (the blocks
before the first wrapped one) is computed once per token batch and kept in a small cache.
The image tower can start from an `ImagePrefix` (its frozen first blocks, computed once
per image by the evaluator).
"""

from __future__ import annotations

import contextlib
import functools
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import open_clip
import torch
from torch import Tensor, nn

from benchmark import compiled, shortcuts
from benchmark import tf32 as tf32_switch

# Where weights come from (the registries, the checks before loading): `benchmark.backbone_weights`.
from benchmark.backbone_weights import BackboneError, build_clip
from benchmark.host_values import HostMemo

# A block wrapper computes a block's output from (block, block input, attention mask).
# The plain block is `lambda block, x, mask: block(x, attn_mask=mask)`.
BlockWrapper = Callable[[nn.Module, Tensor, "Tensor | None"], Tensor]
BlockWrappers = Mapping[int, BlockWrapper]  # 0-based block index -> wrapper


@dataclass(frozen=True)
class TowerShape:
    width: int
    blocks: int


@dataclass(frozen=True)
class BackboneShape:
    """The towers' depths and widths of a backbone, read from its open_clip config: what a
    method's fit can be checked against before any weights are loaded (`backbone_shape`).
    A built `Backbone` has the same `name`, `text` and `vision` attributes."""

    name: str
    text: TowerShape
    vision: TowerShape


def backbone_shape(name: str) -> BackboneShape | None:
    """`name`'s tower shapes from its config, nothing built; None for a name open_clip does
    not know (`check_backbone` reports it) or a config without plain transformer towers
    (a timm or Hugging Face tower: its shape is known once it is built)."""
    config = open_clip.get_model_config(name) if name in open_clip.list_models() else None
    if not config:
        return None
    text, vision = config.get("text_cfg", {}), config.get("vision_cfg", {})
    try:
        return BackboneShape(
            name,
            TowerShape(int(text["width"]), int(text["layers"])),
            TowerShape(int(vision["width"]), int(vision["layers"])),
        )
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True)
class ImagePrefix:
    """The image tower's residual stream [B, 1 + M, W] at the input of block `blocks`
    (0-based), computed by the frozen backbone alone (`Backbone.image_prefix`). The image
    entry points accept it in place of images and run only the blocks from `blocks` on;
    a block wrapper or visual prompt that would act inside the prefix is an error."""

    tokens: Tensor
    blocks: int

    def __len__(self) -> int:
        return len(self.tokens)

    def to(self, device) -> "ImagePrefix":
        return ImagePrefix(self.tokens.to(device), self.blocks)


class Backbone(nn.Module):
    """A frozen open_clip CLIP with the encoder entry points the methods need.

    Features returned by the `encode_*` functions are projected but not normalized.
    """

    def __init__(self, model: open_clip.CLIP, name: str, pretrained: str | None) -> None:
        super().__init__()
        if not hasattr(model, "visual") or not hasattr(model.visual, "transformer"):
            raise BackboneError(
                f"backbone {name!r} has no ViT image tower; the methods need transformer blocks "
                "in both towers (choose a ViT-* model)"
            )
        self.model = model.eval().requires_grad_(False)
        self.name = name
        self.pretrained = pretrained
        self.tokenizer = open_clip.get_tokenizer(name)
        visual = model.visual
        size = visual.image_size
        self.image_size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.image_mean = tuple(getattr(visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN)
        self.image_std = tuple(getattr(visual, "image_std", None) or open_clip.OPENAI_DATASET_STD)
        self.text = TowerShape(model.transformer.width, len(model.transformer.resblocks))
        self.vision = TowerShape(visual.transformer.width, len(visual.transformer.resblocks))
        self.embed_dim = int(model.text_projection.shape[1])
        self.context_length = int(model.context_length)
        self._causal_text = _is_causal(model.attn_mask, self.context_length)
        self._text_prefixes = _BoundedCache(TEXT_PREFIX_CACHE_BYTES)

    @property
    def key(self) -> str:
        """Identifies the weights, for feature-cache keys."""
        return f"{self.name}@{self.pretrained}"

    @property
    def logit_scale(self) -> float:
        """CLIP's logit scale, read on the host once (not in every step: `host_values`)."""
        return _LOGIT_SCALE(self.model.logit_scale)

    def train(self, mode: bool = True) -> "Backbone":
        # Frozen: dropout and the like stay in eval mode whatever the caller asks.
        return super().train(False)

    # -- text -------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> Tensor:
        return self.tokenizer(list(texts)).to(self.model.token_embedding.weight.device)

    def token_embedding(self, tokens: Tensor) -> Tensor:
        return self.model.token_embedding(tokens)

    def encode_text(
        self,
        tokens: Tensor,
        embeddings: Tensor | None = None,
        block_wrappers: BlockWrappers | None = None,
    ) -> Tensor:
        """Text features [B, D] of `tokens`, or of `embeddings` [B, L, W] that replace the
        token embeddings (learned context); `tokens` still marks where each prompt ends
        (the EOT token has the highest id). `embeddings` may stop after `text_length(tokens)`
        positions (the rest is never read)."""
        length = self.text_length(tokens)
        if embeddings is None:
            start = self.text_start(block_wrappers)
            x = self.frozen_text(tokens, start, length)
        else:
            start = 0
            if embeddings.shape[1] < length:
                raise ValueError(f"text embeddings of {embeddings.shape[1]} positions; the prompts need {length}")
            x = self.embedded_text(embeddings[:, :length])
        return self.encode_text_stream(x, tokens.argmax(dim=-1), block_wrappers, start)

    def text_start(self, block_wrappers: BlockWrappers | None) -> int:
        """The first text block that runs per call for fixed tokens: under the shortcuts the
        blocks before the first wrapped one are frozen and their output is cached."""
        return min(block_wrappers or {}, default=self.text.blocks) if shortcuts.active() else 0

    def frozen_text(self, tokens: Tensor, start: int, length: int) -> Tensor:
        """The residual stream [C, length, W] entering text block `start` (0-based) for fixed
        `tokens`, cut to `length` positions (at least `text_length(tokens)`): frozen, so it can
        be computed outside the trainable part (and under `torch.func.vmap`, before it)."""
        if start > 0:
            mask = None if self.model.attn_mask is None else self.model.attn_mask[:length, :length]
            return self._text_prefix(tokens, length, start, mask)
        return self.embedded_text(self.token_embedding(tokens[:, :length]))

    def embedded_text(self, embeddings: Tensor) -> Tensor:
        """The text tower's input: token (or learned) embeddings [C, L, W] plus the first L
        positional embeddings, in fp32 under any precision."""
        return embeddings.float() + self.model.positional_embedding[: embeddings.shape[-2]].float()

    def encode_text_stream(
        self, x: Tensor, eot: Tensor, block_wrappers: BlockWrappers | None, start: int = 0
    ) -> Tensor:
        """Text features [C, D] from the residual stream `x` [C, L, W] entering block `start`,
        read at each prompt's end-of-text position `eot` [C]. No data-dependent Python: it
        runs under `torch.func.vmap` (clients trained in one pass)."""
        length = x.shape[-2]
        mask = None if self.model.attn_mask is None else self.model.attn_mask[:length, :length]
        x = _run_blocks(self.model.transformer, x, mask, block_wrappers, "text", start)
        x = self.model.ln_final(x)
        x = x.gather(1, eot[:, None, None].expand(-1, 1, x.shape[-1])).squeeze(1)
        return project(x, self.model.text_projection)

    def text_length(self, tokens: Tensor) -> int:
        """How many positions of `tokens` the text tower runs: up to the longest prompt's
        end-of-text token when the tower is causal and shortcuts are on, else all of them."""
        if not (self._causal_text and shortcuts.active()) or tokens.numel() == 0:
            return tokens.shape[-1]
        return _TEXT_LENGTH(tokens)  # read once per token tensor, not in every step

    def _text_prefix(self, tokens: Tensor, length: int, blocks: int, mask: Tensor | None) -> Tensor:
        """The residual stream after the frozen text blocks 0 .. blocks-1 on `tokens` cut to
        `length` positions, computed once per (tokens, length, blocks, `computing_key`: the
        device, autocast, TF32 and compiled blocks that compute it). The token ids are read
        on the host once per token tensor (`host_values`), not per step."""
        key = (tokens.shape, _TOKEN_BYTES(tokens), length, blocks, computing_key(tokens.device))
        tokens = tokens[:, :length]
        cached = self._text_prefixes.get(key)
        if cached is None:
            # Frozen and parameter-free upstream: no graph is needed; a normal tensor even
            # when first asked for under inference mode, so training can reuse it.
            with torch.inference_mode(False), torch.no_grad():
                x = self.embedded_text(self.token_embedding(tokens))
                x = _run_blocks(self.model.transformer, x, mask, None, "text", 0, stop=blocks)
            cached = self._text_prefixes.put(key, x)
        return cached

    # -- image ------------------------------------------------------------------------
    def image_tokens(
        self,
        images: "Tensor | ImagePrefix",
        block_wrappers: BlockWrappers | None = None,
        prompts: Tensor | None = None,
    ) -> Tensor:
        """All output tokens of the image tower after `ln_post`, unprojected: [B, 1 + M (+ P), W].

        `prompts` ([P, W] shared by the batch, or [B, P, W]) are appended after the class and
        patch tokens once those have their positional embeddings, before `ln_pre`, so the
        prompts carry no position (VPT, MaPLe). A block wrapper may replace them deeper in.
        `images` may be an `ImagePrefix`: the tower then runs from its block on.
        """
        if isinstance(images, ImagePrefix):
            return self._image_tower_from(images, block_wrappers, prompts)
        return self.image_tower(self.image_embeddings(images), block_wrappers, prompts)

    def image_embeddings(self, images: Tensor) -> Tensor:
        """The image tower's input sequence [B, 1 + M, W]: class and patch tokens with their
        positional embeddings, before `ln_pre` (FedMVP builds its prompts from it)."""
        if isinstance(images, ImagePrefix):
            raise BackboneError(
                "image_embeddings got an ImagePrefix (images already run through frozen blocks): a method "
                "that needs the embeddings must declare frozen_image_blocks = 0"
            )
        visual = self.model.visual
        with full_precision(images.device.type):  # the stream starts fp32 (module docstring)
            x = visual.conv1(images.to(visual.conv1.weight.dtype))  # [B, W, grid, grid]
            x = x.flatten(2).transpose(1, 2)  # [B, M, W]
            cls = visual.class_embedding.to(x.dtype).expand(x.shape[0], 1, -1)
            x = torch.cat([cls, x], dim=1) + visual.positional_embedding.to(x.dtype)
            return visual.patch_dropout(x)

    def image_tower(
        self, embeddings: Tensor, block_wrappers: BlockWrappers | None = None, prompts: Tensor | None = None
    ) -> Tensor:
        """`image_tokens` from `image_embeddings`: append `prompts`, ln_pre, the blocks, ln_post."""
        x = self._image_input(embeddings, prompts)
        x = _run_blocks(self.model.visual.transformer, x, None, block_wrappers, "vision")
        return self.model.visual.ln_post(x)

    def _image_input(self, embeddings: Tensor, prompts: Tensor | None) -> Tensor:
        visual = self.model.visual
        with full_precision(embeddings.device.type):
            x = embeddings
            if prompts is not None:
                if prompts.dim() == 2:
                    prompts = prompts.unsqueeze(0).expand(x.shape[0], -1, -1)
                x = torch.cat([x, prompts.to(x.dtype)], dim=1)
            return visual.ln_pre(x)

    def image_prefix(self, images: Tensor, blocks: int) -> ImagePrefix:
        """The frozen image tower's first `blocks` blocks on `images` (no prompts, no
        wrappers): what `image_tokens` of an unwrapped prefix computes, kept for reuse."""
        if not 0 <= blocks <= self.vision.blocks:
            raise ValueError(f"an image prefix of {blocks} blocks does not fit a tower of {self.vision.blocks}")
        with torch.no_grad():
            x = self._image_input(self.image_embeddings(images), None)
            x = _run_blocks(self.model.visual.transformer, x, None, None, "vision", 0, stop=blocks)
        return ImagePrefix(x, blocks)

    def _image_tower_from(
        self, prefix: ImagePrefix, block_wrappers: BlockWrappers | None, prompts: Tensor | None
    ) -> Tensor:
        inside = sorted(i for i in (block_wrappers or {}) if i < prefix.blocks)
        if prompts is not None or inside:
            what = "visual prompts" if prompts is not None else f"a wrapper on image block {inside[0] + 1}"
            raise BackboneError(
                f"the image tower was given its first {prefix.blocks} frozen blocks precomputed (the method's "
                f"frozen_image_blocks = {prefix.blocks}), but the method adds {what} inside them. Set "
                f"frozen_image_blocks to the number of image blocks before the first one it changes (0 with prompts)."
            )
        x = _run_blocks(self.model.visual.transformer, prefix.tokens, None, block_wrappers, "vision", prefix.blocks)
        return self.model.visual.ln_post(x)

    def encode_image(
        self,
        images: "Tensor | ImagePrefix",
        block_wrappers: BlockWrappers | None = None,
        prompts: Tensor | None = None,
    ) -> Tensor:
        """Image features [B, D] (the class token, projected); `prompts` as in `image_tokens`."""
        return project(self.image_tokens(images, block_wrappers, prompts)[:, 0], self.model.visual.proj)

    def encode_image_patches(
        self, images: "Tensor | ImagePrefix", block_wrappers: BlockWrappers | None = None
    ) -> tuple[Tensor, Tensor]:
        """(image features [B, D], projected patch features [B, M, D]); the class token is
        dropped from the patches (FedOTP matches prompts to the M patches)."""
        tokens = project(self.image_tokens(images, block_wrappers), self.model.visual.proj)
        return tokens[:, 0], tokens[:, 1:]

    def blocks(self, tower: str) -> nn.ModuleList:
        """The residual blocks of 'text' or 'vision', for wrappers that need their weights."""
        if tower == "text":
            return self.model.transformer.resblocks
        if tower == "vision":
            return self.model.visual.transformer.resblocks
        raise ValueError(f"tower must be 'text' or 'vision', got {tower!r}")

    @torch.no_grad()
    def zero_shot_text_features(self, class_names: Sequence[str], template: str = "a photo of a {}.") -> Tensor:
        return self.encode_text(self.tokenize([template.format(c) for c in class_names]))


def full_precision(device_type: str) -> contextlib.AbstractContextManager:
    """Autocast off on `device_type` ('cpu', 'cuda'): what runs inside computes in the dtype
    of its inputs, fp32 here."""
    return torch.autocast(device_type, enabled=False)


def project(x: Tensor, projection: Tensor) -> Tensor:
    """x @ projection in fp32 under any autocast: a feature's small changes survive to the logits."""
    with full_precision(x.device.type):
        return x.float() @ projection.float()


def _run_blocks(
    transformer: nn.Module,
    x: Tensor,
    attn_mask: Tensor | None,
    block_wrappers: BlockWrappers | None,
    tower: str,
    start: int = 0,
    stop: int | None = None,
) -> Tensor:
    """Blocks start .. stop-1 (0-based; all by default) on the residual stream `x`."""
    if not transformer.batch_first:  # open_clip < 2.24 keeps [L, B, W]
        raise BackboneError("open_clip_torch with batch_first transformers (>= 2.24) is required")
    wrappers = block_wrappers or {}
    x = x.float()  # the residual stream is fp32 under any precision (module docstring)
    blocks = transformer.resblocks
    for index in range(start, len(blocks) if stop is None else stop):
        block, wrapper = compiled.block(blocks[index]), wrappers.get(index)
        x = block(x, attn_mask=attn_mask) if wrapper is None else wrapper(block, x, attn_mask)
        if x.dtype != torch.float32:
            raise BackboneError(
                f"{tower} block {index + 1}{' (wrapped by a method)' if wrapper else ''} returned a "
                f"{x.dtype} residual stream; it must stay float32 under mixed precision, or small terms added "
                "to it are rounded away. Add the block's branch to its float32 input (x + branch(x))."
            )
    return x


def _is_causal(mask: Tensor | None, length: int) -> bool:
    """Whether `mask` is the additive causal mask (-inf above the diagonal, 0 elsewhere):
    only then can the text tower stop at the last prompt's end."""
    if mask is None or tuple(mask.shape) != (length, length):
        return False
    causal = torch.full((length, length), float("-inf"), device=mask.device).triu(1)
    return torch.equal(mask.float(), causal)


def computing_key(device: torch.device | str) -> tuple:
    """Everything besides the weights and the inputs that decides the bits of a frozen
    activation computed here now, for the keys of every cache of activations (text prefixes
    here, image features and prefixes and augmented views' features in
    `benchmark.federation.features`): the device; the autocast dtype (fp32 without one);
    whether 32-bit matrix products and convolutions may use TF32 (the run's `--tf32`, PyTorch's
    flags and float32 matmul precision); whether the towers' blocks run compiled (`--compile-blocks`,
    fused kernels sum in another order); whether the exact shortcuts are on (`--no-shortcuts`
    runs the plain path, equal only up to float rounding). Two cells that differ in any of
    these never share an entry (tests/federation/test_cache_keys.py)."""
    device = torch.device(device)
    kind = device.type
    autocast = str(torch.get_autocast_dtype(kind)) if torch.is_autocast_enabled(kind) else "fp32"
    tf32 = (
        tf32_switch.active(),  # what the run asked for (`--tf32`), on any device
        torch.backends.cuda.matmul.allow_tf32,  # and what the flags let CUDA do now
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    blocks = compiled.mode() if compiled.active() else "eager"
    return (str(device), autocast, tf32, blocks, shortcuts.active())


# Host reads made once per tensor (`benchmark.host_values`), not in every step.
_LOGIT_SCALE = HostMemo(lambda scale: float(scale.exp()))
_TEXT_LENGTH = HostMemo(lambda tokens: int(tokens.argmax(dim=-1).max()) + 1)
_TOKEN_BYTES = HostMemo(lambda tokens: tokens.cpu().numpy().tobytes())


# Bytes of frozen text prefixes kept per backbone (one entry: classes x prompt length x
# width fp32, e.g. 1000 x 20 x 512 x 4 B = 41 MB); the least recently used go first.
TEXT_PREFIX_CACHE_BYTES = 1 << 30


class _BoundedCache:
    """A least-recently-used map of tensors holding at most `max_bytes`. An entry that was
    changed in place since it was stored (a wrapper writing into its input) is dropped,
    never served."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict = OrderedDict()  # key -> (tensor, its version when stored)
        self._bytes = 0

    def get(self, key) -> Tensor | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        value, version = entry
        if value._version != version:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key, value: Tensor) -> Tensor:
        size = value.numel() * value.element_size()
        if size > self.max_bytes:
            return value  # too large to keep: used once
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (value, value._version)
        self._bytes += size
        while self._bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, key) -> None:
        value, _ = self._entries.pop(key)
        self._bytes -= value.numel() * value.element_size()


# -- loading ---------------------------------------------------------------------------
def load_backbone(name: str, pretrained: str | Path | None = None, device: str | torch.device = "cpu") -> Backbone:
    """The frozen backbone `name` with weights `pretrained`, built once per process.

    `pretrained`: None or "none" (random weights, seeded: for parameter counts and tests),
    an open_clip tag ("openai", "laion2b_s34b_b88k", ...), a local checkpoint file, or the
    name of a registered provider (e.g. the toy world's CLIP).
    """
    key = None if pretrained in (None, "", "none") else str(pretrained)
    return _load_backbone_cached(name, key, str(torch.device(device)))


@functools.lru_cache(maxsize=4)
def _load_backbone_cached(name: str, pretrained: str | None, device: str) -> Backbone:
    return Backbone(build_clip(name, pretrained, device), name, pretrained).to(device)
