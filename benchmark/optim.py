"""Optimizer recipes shared by methods (each client-round builds a fresh one)."""

from __future__ import annotations

from typing import Iterable

import lightning as L
import torch


def sgd_with_cosine(
    module: L.LightningModule, params: Iterable, lr: float, momentum: float = 0.9, weight_decay: float = 5e-4
) -> dict:
    """CoOp's recipe: SGD with cosine decay over the client's local steps of this round."""
    optimizer = torch.optim.SGD(list(params), lr=lr, momentum=momentum, weight_decay=weight_decay)
    steps = max(1, int(module.trainer.estimated_stepping_batches))
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
