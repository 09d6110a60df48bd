"""The CLIP protocol's training augmentation, RandomResizedCrop(scale 0.08-1, bicubic) +
horizontal flip, drawn per view and applied to a whole batch on the training device
(`--augment-backend device`).

A view is one image in one local epoch of one client-round: its draws come from a generator
seeded by (client-round seed, epoch, position) (`view_seed`), the seed the PIL path
(torchvision per image, `data.transforms.clip_transforms`) seeds torch's CPU generator with,
and are drawn by torchvision's own `RandomResizedCrop.get_params` and flip rule in the same
order: the two backends crop the same boxes and flip the same views (tested).

The resampling is PIL's, written as two batched matrix products: PIL resizes a crop with a
separable bicubic filter (a = -0.5) widened by the shrink factor (its antialiasing), taps
clamped to the crop, coefficients normalized and rounded to 22-bit fixed point, horizontal
pass first, each pass rounded to 8 bits. `pil_coefficients` builds exactly those
coefficients for every view at once and `resized_crops` applies them in float64, whose sums
of 8-bit pixels times 22-bit coefficients are exact; so on images no larger than the decode
limit (`data.decoded`) the pixels equal PIL's (tests/data/test_augmentation.py compares every
pixel; a larger image is shrunk once when decoded, and its views then differ by the
resampling of that shrink). The backend stays part of a cell's identity all the same: the
equality is tested on sample images, not proved for every image PIL can open.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torchvision import transforms as T

CROP_SCALE = (0.08, 1.0)  # the CLIP protocol's RandomResizedCrop (data.transforms)
CROP_RATIO = (3 / 4, 4 / 3)  # torchvision's default, which the protocol keeps
FLIP_P = 0.5
PRECISION_BITS = 22  # PIL's fixed point for 8-bit resampling (32 - 8 - 2)


def view_seed(seed: int, epoch: int, position: int) -> int:
    """The seed of one view's random draws: (client-round seed, local epoch, position of the
    image in the client's training set). The PIL path (`ClientTrainSet`) seeds with it too."""
    return int(np.random.SeedSequence([seed, epoch, position]).generate_state(1, np.uint64)[0])


@dataclass(frozen=True)
class CropDraw:
    """One view's crop box in the original image's pixels and its flip."""

    top: int
    left: int
    height: int
    width: int
    flip: bool


def crop_draw(seed: int, height: int, width: int) -> CropDraw:
    """The draws torchvision makes for the view seeded by `seed` (`view_seed`) on an image of
    `height` x `width`: RandomResizedCrop's box, then RandomHorizontalFlip's coin, from torch's
    CPU generator seeded with `seed`, as the PIL path draws them."""
    shape_only = torch.empty(()).expand(3, height, width)  # get_params reads the size only
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        top, left, h, w = T.RandomResizedCrop.get_params(shape_only, list(CROP_SCALE), list(CROP_RATIO))
        flip = bool(torch.rand(1) < FLIP_P)
    return CropDraw(top, left, h, w, flip)


def _bicubic(x: torch.Tensor) -> torch.Tensor:
    """PIL's bicubic kernel (a = -0.5)."""
    a = -0.5
    x = x.abs()
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return torch.where(x < 1.0, near, torch.where(x < 2.0, far, torch.zeros_like(x)))


def pil_coefficients(in_sizes: torch.Tensor, out_size: int, in_max: int) -> torch.Tensor:
    """[B, out_size, in_max] float64: row o of view b holds the weights PIL's bicubic resize of
    an `in_sizes[b]`-pixel line to `out_size` gives output pixel o (ImagingResample's
    precompute_coeffs and normalize_coeffs_8bpc), as fixed-point integers / 2^22; zero past
    the view's line."""
    device = in_sizes.device
    size = in_sizes.to(torch.float64).view(-1, 1, 1)
    scale = size / out_size
    filterscale = scale.clamp(min=1.0)
    support = 2.0 * filterscale  # the bicubic kernel's support, widened when shrinking
    center = (torch.arange(out_size, device=device, dtype=torch.float64).view(1, -1, 1) + 0.5) * scale
    xmin = torch.floor(center - support + 0.5).clamp(min=0)  # C's (int) truncation; negatives clamp to 0
    xmax = torch.minimum(torch.floor(center + support + 0.5), size)
    x = torch.arange(in_max, device=device, dtype=torch.float64).view(1, 1, -1)
    taps = (x >= xmin) & (x < xmax)
    # times the inverse, not divided: PIL's arithmetic to the last bit (a coefficient rounded to
    # 22 bits the other way moves a pixel by one level)
    weights = torch.where(
        taps, _bicubic((x - center + 0.5) * (1.0 / filterscale)), torch.zeros((), dtype=torch.float64)
    )
    total = weights.sum(-1, keepdim=True)
    weights = torch.where(total != 0, weights / total, weights)
    fixed = torch.where(weights < 0, weights * (1 << PRECISION_BITS) - 0.5, weights * (1 << PRECISION_BITS) + 0.5)
    return torch.trunc(fixed) / (1 << PRECISION_BITS)


def _to_8bit(sums: torch.Tensor) -> torch.Tensor:
    """PIL's clip8: (sum + 2^21) >> 22, clamped to 0..255 (the sums are of pixels x coefficients / 2^22)."""
    return torch.floor(sums + 0.5).clamp_(0, 255)


def resized_crops(
    crops: torch.Tensor,
    heights: torch.Tensor,
    widths: torch.Tensor,
    flips: torch.Tensor,
    size: int,
    mean: Sequence[float],
    std: Sequence[float],
) -> torch.Tensor:
    """Every view of a batch at once: `crops` uint8 [B, 3, H, W], view b's crop top-left in it
    (`heights[b]` x `widths[b]`, the rest ignored), resized to `size` x `size` as PIL resizes,
    flipped where `flips`, then `ToTensor` + `Normalize(mean, std)` as torchvision computes
    them. Returns float32 [B, 3, size, size] on the crops' device."""
    device = crops.device
    with torch.autocast(device.type, enabled=False):  # the data path's arithmetic is its own
        across = pil_coefficients(widths.to(device), size, crops.shape[-1])  # [B, size, W]
        down = pil_coefficients(heights.to(device), size, crops.shape[-2])  # [B, size, H]
        pixels = crops.to(torch.float64)
        rows = _to_8bit(torch.einsum("bcyx,bsx->bcys", pixels, across))  # horizontal pass first, as PIL
        image = _to_8bit(torch.einsum("bty,bcys->bcts", down, rows))
        image = torch.where(flips.to(device).view(-1, 1, 1, 1), image.flip(-1), image)
        tensor = image.to(torch.float32).div(255)  # ToTensor
        mean_t, std_t = _normalization(tuple(mean), tuple(std), device)
        return tensor.sub_(mean_t).div_(std_t)  # Normalize


@functools.lru_cache(maxsize=8)
def _normalization(mean: tuple[float, ...], std: tuple[float, ...], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Normalize's mean and std [1, 3, 1, 1] on `device`, copied there once (not per batch)."""
    with torch.inference_mode(False):  # normal tensors, whichever mode first asks
        return tuple(torch.tensor(v, dtype=torch.float32, device=device).view(1, 3, 1, 1) for v in (mean, std))
