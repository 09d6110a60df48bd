"""pFedMMA: multi-modal adapters in both CLIP towers; only the shared projection is federated.

Written from docs/methods.md ("pFedMMA"), after MMA (Yang et al., CVPR 2024) and pFedMMA.
In every adapted block b (1-based, both towers; the paper: 5..12 = the top 8 of 12, and the
default `first_block: auto` adapts the top two thirds of any backbone's blocks the same way):

    h   = ln_1(x)                                  (the block's own frozen pre-norm)
    y   = up_m(relu(shared_b(relu(down_m(h))))) * alpha      m = text | vision
    out = block(x) + y                             (parallel to the whole block, every token)

`shared_b` is one Linear used by both towers, so it gets gradient from both; it is the only
state a client uploads (FedAvg by n_i, the average goes to every client). down/up stay
personal. Gradient scaling: identity forward, gradient x alpha at the adapter's input and
x 1/alpha at its output, so the adapter's *parameters* receive 1/alpha times their true
gradient while the gradient that reaches x through the adapter is the true one. Under
SGD with momentum this equals `alpha * adapter(h)` trained with a 1/alpha times larger
learning rate in everything but weight decay: the gradient step and momentum are linear in
the gradient, so scaling the gradient or the lr is the same; the decay term wd * theta is
added to the gradient unscaled, so here it is alpha times weaker relative to the gradient
than it would be with the larger lr.

Choices the spec leaves open (documented, not the paper's):
- `shared_dim` != `adapter_dim` (an ablation only; the paper has 32 and 32): down maps
  width -> adapter_dim, shared adapter_dim -> shared_dim, up shared_dim -> width, so
  `shared_dim` is exactly the size of what is federated.
- Towers of different depth (ViT-L-14: text 12, vision 24): a shared projection pairs the
  text and the vision block of the same index, so the range is one range of block indices
  applied to both towers and must fit the shallower one; `last_block = 0` means its last.
"""

from __future__ import annotations

from typing import Literal, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.backbone import Backbone, BackboneShape, BlockWrappers
from benchmark.method import OPTIMIZER_RANGES, FederatedMethod, LogUniform, Range, first
from benchmark.method_registration import register_method

TEMPLATE = "a photo of a {}."
TOWERS = ("text", "vision")
FEDERATE = {"shared": ("shared.*",), "all": ("*",), "none": ()}


def scale_grad(x: Tensor, factor: float) -> Tensor:
    """Identity forward (bit for bit: x + 0, or x itself without autograd); the gradient is
    multiplied by `factor` on the way back. Plain operations rather than an autograd.Function:
    under `torch.func.vmap` (clients trained together) a Function costs ~0.8 ms a call to
    derive its batching rule."""
    if not torch.is_grad_enabled():  # evaluation: no gradient to scale, no work to add
        return x
    frozen = x.detach()
    return frozen + (x - frozen) * factor


def _linear(fan_in: int, fan_out: int) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.kaiming_normal_(layer.weight, mode="fan_out", nonlinearity="relu")
    nn.init.zeros_(layer.bias)
    return layer


def auto_first_block(depth: int) -> int:
    """The first of the top two thirds of `depth` blocks (1-based): the paper adapts the top 8
    of ViT-B/16's 12 (blocks 5..12); the toy CLIP's 4 get blocks 2..4."""
    return depth - round(2 * depth / 3) + 1


def adapted_blocks(backbone: Backbone | BackboneShape, first_block: int | str, last_block: int) -> list[int]:
    """The 1-based block indices adapted in both towers; a clear error when out of range.
    `backbone`: a built backbone or its shape read from its config (`backbone_shape`)."""
    depth = min(backbone.text.blocks, backbone.vision.blocks)
    if first_block == "auto":
        first_block = auto_first_block(depth)
    last = depth if last_block == 0 else last_block
    if not 1 <= first_block <= last <= depth:
        raise ValueError(
            f"pfedmma: adapted blocks {first_block}..{last_block if last_block else 'last'} do not fit backbone "
            f"{backbone.name!r} (text tower {backbone.text.blocks} blocks, vision tower {backbone.vision.blocks}; "
            f"a shared projection pairs the blocks of the same index, so the range must lie in 1..{depth}). "
            f"Choose 1 <= --first-block <= --last-block <= {depth} (1-based; --last-block 0 means block {depth}; "
            f"--first-block auto means block {auto_first_block(depth)}, the first of the top two thirds)."
        )
    return list(range(first_block, last + 1))


@register_method("pfedmma")
class PFedMMA(FederatedMethod):
    """Multi-modal adapters in both towers; only the shared projections are federated."""

    tunable = {"lr": LogUniform.around(0.001)}  # around the paper's lr, the default below
    lr_schedule = "SGD at a constant lr (a fresh optimizer every client-round)"
    upload_keys = FEDERATE["shared"]  # the paper; an instance built with `federate` overrides it
    frozen_image_features = False  # the image tower runs through this client's adapters
    batched_training = True
    gpu_precision = "32-true"  # alpha * y at init is as small as bf16's matmul noise (docs/performance.md, Precision)
    ranges = {
        **OPTIMIZER_RANGES,
        "first_block": Range(ge=1),
        "last_block": Range(ge=0),
        "adapter_dim": Range(ge=1),
        "shared_dim": Range(ge=1),
        "alpha": Range(gt=0),  # gradients are scaled by 1/alpha
    }

    def __init__(
        self,
        backbone: Backbone,
        first_block: int | Literal["auto"] = "auto",
        last_block: int = 0,
        adapter_dim: int = 32,
        shared_dim: int = 32,
        alpha: float = 0.001,
        federate: Literal["shared", "all", "none"] = "shared",
        lr: float = 0.001,
        momentum: float = 0.9,
        weight_decay: float = 5e-4,
    ) -> None:
        """Args:
        first_block: first adapted block, 1-based, in both towers; auto = the first of the top
            two thirds of the blocks (5 of 12, the paper's; 2 of the toy CLIP's 4).
        last_block: last adapted block, 1-based; 0 = the shallower tower's last block.
        adapter_dim: width of the personal down/up projections (the paper: 32).
        shared_dim: width of the shared projection, i.e. of what is federated (the paper: 32).
        alpha: scale of the adapter's output; its parameters get 1/alpha times their gradient.
        federate: what a client uploads: the shared projections (the paper), every adapter,
            or nothing (local training only, an ablation).
        lr: SGD learning rate, constant within a client-round.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        """
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        # Instance-level: the ablation `federate` decides what travels ("none" = local training).
        self.upload_keys = FEDERATE[federate]
        self.alpha = float(alpha)
        self.block_numbers = adapted_blocks(backbone, first_block, last_block)
        # The image blocks before the first adapted one are the frozen backbone's: evaluation
        # computes them once per test image for every client.
        self.frozen_image_blocks = self.block_numbers[0] - 1
        widths = {"text": backbone.text.width, "vision": backbone.vision.width}
        # Keys: "<tower>_down.<block>", "<tower>_up.<block>", "shared.<block>" (1-based blocks).
        blocks = [str(b) for b in self.block_numbers]
        self.text_down = nn.ModuleDict({b: _linear(widths["text"], adapter_dim) for b in blocks})
        self.text_up = nn.ModuleDict({b: _linear(shared_dim, widths["text"]) for b in blocks})
        self.vision_down = nn.ModuleDict({b: _linear(widths["vision"], adapter_dim) for b in blocks})
        self.vision_up = nn.ModuleDict({b: _linear(shared_dim, widths["vision"]) for b in blocks})
        self.shared = nn.ModuleDict({b: _linear(adapter_dim, shared_dim) for b in blocks})
        self._tokens: dict[tuple[str, ...], Tensor] = {}

    @classmethod
    def fit_to_backbone(cls, shape, hyperparameters: dict) -> dict:
        """`first_block: auto` resolved to a block number; the range must fit the shallower tower."""
        blocks = adapted_blocks(shape, hyperparameters["first_block"], hyperparameters["last_block"])
        return {**hyperparameters, "first_block": blocks[0]}

    # -- the adapter -----------------------------------------------------------------------
    def adapter(self, tower: str, block: int, h: Tensor) -> Tensor:
        """up(relu(shared(relu(down(h))))), unscaled and with true gradients."""
        key = str(block)
        down, up = getattr(self, f"{tower}_down")[key], getattr(self, f"{tower}_up")[key]
        return up(F.relu(self.shared[key](F.relu(down(h)))))

    def adapted_block(self, tower: str, block_number: int, block: nn.Module, x: Tensor, attn_mask) -> Tensor:
        h = scale_grad(block.ln_1(x), self.alpha)  # x alpha on the way back into x ...
        y = scale_grad(self.adapter(tower, block_number, h), 1.0 / self.alpha)  # ... x 1/alpha into the adapter
        return block(x, attn_mask=attn_mask) + self.alpha * y

    def block_wrappers(self, tower: str) -> BlockWrappers:
        """{0-based block index: wrapper} for `tower`, built per call (the backbone is shared)."""
        return {
            b - 1: (lambda block, x, mask, b=b: self.adapted_block(tower, b, block, x, mask))
            for b in self.block_numbers
        }

    # -- computation -----------------------------------------------------------------------
    def encode_images(self, images: Tensor) -> Tensor:
        return F.normalize(self.backbone.encode_image(images, self.block_wrappers("vision")), dim=-1)

    def encode_classes(self, class_names: Sequence[str]) -> Tensor:
        return self.encode_class_inputs(first(self.class_inputs([class_names])))

    def class_inputs(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor, Tensor]:
        """The text tower's frozen part for each list: the residual stream entering the first
        block that runs per call (cached) and each prompt's end, cut to one common length."""
        tokens = [self._prompt_tokens(names) for names in class_lists]
        length = max(self.backbone.text_length(t) for t in tokens)
        start = self.backbone.text_start(self.block_wrappers("text"))
        streams = [self.backbone.frozen_text(t, start, length) for t in tokens]
        return torch.stack(streams), torch.stack([t.argmax(dim=-1) for t in tokens])

    def encode_class_inputs(self, inputs: tuple[Tensor, Tensor]) -> Tensor:
        x, eot = inputs
        wrappers = self.block_wrappers("text")
        return F.normalize(
            self.backbone.encode_text_stream(x, eot, wrappers, self.backbone.text_start(wrappers)), dim=-1
        )

    def _prompt_tokens(self, class_names: Sequence[str]) -> Tensor:
        key = tuple(class_names)
        if key not in self._tokens:  # the frozen tokenizer only; the text tower runs every call
            self._tokens[key] = self.backbone.tokenize([TEMPLATE.format(c) for c in class_names])
        return self._tokens[key].to(self.device)

    def configure_optimizers(self):
        hp = self.hparams  # constant learning rate (the paper's recipe): no scheduler
        return torch.optim.SGD(self.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
