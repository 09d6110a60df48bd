"""Frozen image features, computed once per (backbone, split) and shared by all clients.

Exact: used only for methods whose `encode_images` depends on the frozen backbone alone
(`FederatedMethod.frozen_image_features`) and for splits under a deterministic transform.
Computed under the caller's autocast (the run's precision), and keyed by it.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from data.base import LabeledImages


class FeatureCache:
    def __init__(self, batch_size: int = 256, num_workers: int = 0, progress: bool = True) -> None:
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.progress = progress
        self._store: dict[tuple[str, ...], tuple[Tensor, Tensor]] = {}  # key -> (features, done mask)

    @torch.no_grad()
    def features(self, method, split: LabeledImages, indices: list[int] | None = None) -> Tensor:
        """Features [len(split), ...] of `split` (what `method.encode_images` returns per
        image: [D], or [M, D] for patch features); rows outside `indices` may be unset."""
        key = (method.backbone.key, method.image_feature_kind, split.cache_key, _autocast_key(method.device.type))
        wanted = list(range(len(split))) if indices is None else list(indices)
        if key not in self._store:
            self._store[key] = (torch.empty(0), torch.zeros(len(split), dtype=torch.bool))
        feats, done = self._store[key]
        todo = [i for i in wanted if not done[i]]
        if todo:
            computed = self._encode(method, split, todo)
            if feats.numel() == 0:
                feats = torch.zeros(len(split), *computed.shape[1:], dtype=computed.dtype)
            feats[todo] = computed
            done[todo] = True
            self._store[key] = (feats, done)
        return feats

    def _encode(self, method, split: LabeledImages, indices: list[int]) -> Tensor:
        from tqdm.auto import tqdm

        loader = DataLoader(Subset(split, indices), batch_size=self.batch_size, num_workers=self.num_workers)
        device = method.device
        out = []
        for images, _ in tqdm(loader, desc=f"features {split.name}", disable=not self.progress, leave=False):
            out.append(method.encode_images(images.to(device)).float().cpu())
        return torch.cat(out)


def _autocast_key(device_type: str) -> str:
    """Features computed under autocast differ from fp32 ones: keep them apart."""
    return str(torch.get_autocast_dtype(device_type)) if torch.is_autocast_enabled(device_type) else "fp32"
