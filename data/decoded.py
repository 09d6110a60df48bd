"""Training images decoded once and held on the training device (`--augment-backend device`).

Each needed image is decoded with PIL once, as its RGB pixels (an image larger than
`max_side` on its longer side is first shrunk to it with PIL's bicubic filter), and the
decoded images are cached on disk under `$FEDBENCH_CACHE/decoded/` (default
~/.cache/fedbench) as one uint8 buffer, keyed by the images' file list (each file with its size
and modification time) and `max_side`, so a second run, or a second method, decodes nothing.
The run keeps them on its device (`DeviceImages`) and augments a batch there at a time: the
draws of every view on the host (`data.augmentation.crop_draw`), each view's crop box copied
out of its image, and one batched resize (`data.augmentation.resized_crops`).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from benchmark.files import atomic_write
from benchmark.host_values import device_tensor
from data.augmentation import crop_draw, resized_crops, view_seed
from data.base import LabeledImages


def cache_root() -> Path:
    return Path(os.environ.get("FEDBENCH_CACHE", Path.home() / ".cache" / "fedbench")) / "decoded"


def cache_key(split: LabeledImages, indices: Sequence[int], side: int) -> str:
    """The file list (paths with size and modification time; an in-memory image's split key)
    and the decode side, hashed. Everything that computes an entry: PIL decodes and resizes to
    uint8 pixels on the host, which no precision, TF32, compile or shortcut setting changes
    (the augmentation that follows is per batch, never cached here)."""
    names = []
    for index in indices:
        name = split.raw_key(index)
        path = Path(name)
        if path.is_file():  # a file: its size and modification time too (an in-memory image: its key)
            stat = path.stat()
            name = f"{name}:{stat.st_size}:{stat.st_mtime_ns}"
        names.append(name)
    payload = json.dumps({"images": names, "side": side, "format": 1}).encode()
    return hashlib.sha256(payload).hexdigest()[:20]


def max_side_for(image_size: int) -> int:
    """Four times the model's input (896 px for 224): DTD's, Caltech101's and most datasets'
    images are kept whole (and their views are PIL's, pixel for pixel); a larger image is
    shrunk once, which keeps a 8 % crop (the protocol's smallest) above the input's resolution."""
    return 4 * image_size


def decode(image, max_side: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """One PIL image -> (uint8 [3, h, w], (original h, w)); shrunk to `max_side` if larger."""
    from PIL import Image

    width, height = image.size
    if max(width, height) > max_side:
        shrink = max_side / max(width, height)
        image = image.resize((max(1, round(width * shrink)), max(1, round(height * shrink))), Image.BICUBIC)
    pixels = torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1).contiguous()
    return pixels, (height, width)


def decoded_images(
    split: LabeledImages, indices: Sequence[int], max_side: int, cache: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """(one flat uint8 buffer of every image's [3, h, w] pixels, int64 [N, 5]: offset into it,
    decoded h, w, original h, w) of images `indices` of `split`, from the disk cache when it
    holds them."""
    indices = [int(i) for i in indices]
    path = cache_root() / f"{cache_key(split, indices, max_side)}.pt" if cache else None
    if path is not None and path.is_file():
        try:
            stored = torch.load(path, weights_only=True)
            return stored["pixels"], stored["layout"]
        except (OSError, RuntimeError, KeyError, EOFError):
            pass  # a torn or older file: decode again and replace it
    images, layout, offset = [], [], 0
    for index in indices:
        pixels, (height, width) = decode(split.raw(index), max_side)
        images.append(pixels.reshape(-1))
        layout.append((offset, pixels.shape[1], pixels.shape[2], height, width))
        offset += pixels.numel()
    flat = torch.cat(images) if images else torch.empty(0, dtype=torch.uint8)
    table = torch.tensor(layout, dtype=torch.int64).reshape(-1, 5)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # A concurrent reader (another run decoding the same images) sees the whole file or none.
        atomic_write(path, lambda tmp: torch.save({"pixels": flat, "layout": table}, tmp))
    return flat, table


class DeviceImages:
    """A training split's needed images, decoded once and held on `device`, augmented there a
    batch at a time. Stands in for the split in the simulator (`ClientTrainSet`)."""

    def __init__(
        self,
        split: LabeledImages,
        indices: Sequence[int],
        device: torch.device | str,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        cache: bool = True,
    ) -> None:
        self.name, self.cache_key = split.name, split.cache_key
        self.image_size, self.mean, self.std = image_size, tuple(mean), tuple(std)
        self.max_side = max_side_for(image_size)
        indices = sorted(set(int(i) for i in indices))
        flat, layout = decoded_images(split, indices, self.max_side, cache)
        self.device = torch.device(device)
        self.pixels = flat.to(self.device)
        self.layout = {index: tuple(row) for index, row in zip(indices, layout.tolist())}

    def __len__(self) -> int:
        return len(self.layout)

    def image(self, index: int) -> torch.Tensor:
        """Image `index` as decoded, uint8 [3, h, w] on the device (a view of the buffer)."""
        offset, height, width, _, _ = self.layout[index]
        return self.pixels[offset : offset + 3 * height * width].view(3, height, width)

    def draws(self, seed: int, views: Sequence[tuple[int, int, int]]) -> list[tuple[int, int, int, int, bool]]:
        """The crop box (top, left, height, width, in decoded pixels) and flip of each of `views`
        (epoch, position, image index) of the client-round seeded by `seed`: torchvision's
        draws on the original image, scaled to the decoded one where it was shrunk."""
        boxes = []
        for epoch, position, index in views:
            _, dec_h, dec_w, height, width = self.layout[index]
            draw = crop_draw(view_seed(seed, epoch, position), height, width)
            if (dec_h, dec_w) == (height, width):
                boxes.append((draw.top, draw.left, draw.height, draw.width, draw.flip))
                continue
            sy, sx = dec_h / height, dec_w / width
            top, left = min(round(draw.top * sy), dec_h - 1), min(round(draw.left * sx), dec_w - 1)
            h = max(1, min(round(draw.height * sy), dec_h - top))
            w = max(1, min(round(draw.width * sx), dec_w - left))
            boxes.append((top, left, h, w, draw.flip))
        return boxes

    def views(self, seed: int, views: Sequence[tuple[int, int, int]]) -> torch.Tensor:
        """The augmented, normalized images [B, 3, S, S] of `views`, on the device."""
        boxes = self.draws(seed, views)
        height = max(b[2] for b in boxes)
        width = max(b[3] for b in boxes)
        crops = torch.zeros(len(boxes), 3, height, width, dtype=torch.uint8, device=self.device)
        for row, ((_, _, index), (top, left, h, w, _)) in enumerate(zip(views, boxes)):
            crops[row, :, :h, :w] = self.image(index)[:, top : top + h, left : left + w]
        # The boxes' sizes and flips in one copy that is not waited for (a blocking copy waits
        # for every kernel queued on the device: a sync per batch).
        sizes = device_tensor([(b[2], b[3], int(b[4])) for b in boxes], self.device, torch.long)
        heights, widths, flips = sizes[:, 0], sizes[:, 1], sizes[:, 2].bool()
        return resized_crops(crops, heights, widths, flips, self.image_size, self.mean, self.std)
