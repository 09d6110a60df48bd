"""Optimizer recipes shared by methods (each client-round builds a fresh one)."""

from __future__ import annotations

import math
from typing import Callable, Iterable

import lightning as L
import torch


def sgd_with_cosine(
    module: L.LightningModule,
    params: Iterable,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 5e-4,
    warmup_epochs: int = 0,
    warmup_lr: float = 1e-5,
) -> dict:
    """CoOp's recipe (Dassl): SGD with cosine decay over the client's local steps of this
    round, after `warmup_epochs` epochs at the constant `warmup_lr` (CoOp: 1 epoch at 1e-5).
    The warm-up lies within the client-round and never takes all of it: with a single local
    epoch it is skipped (see `warmup_and_total_steps`)."""
    optimizer = torch.optim.SGD(list(params), lr=lr, momentum=momentum, weight_decay=weight_decay)
    warmup, steps = warmup_and_total_steps(module, warmup_epochs)
    if warmup == 0:
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    else:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_cosine(warmup, steps, warmup_lr / lr))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def warmup_and_total_steps(module: L.LightningModule, warmup_epochs: int) -> tuple[int, int]:
    """(warm-up steps, all steps) of this client-round: the first `warmup_epochs` local
    epochs, capped at all but the last one (a warm-up over the whole client-round would
    leave the lr at the warm-up value throughout)."""
    steps = max(1, int(module.trainer.estimated_stepping_batches))
    epochs = max(1, int(module.trainer.max_epochs or 1))
    return steps * min(warmup_epochs, epochs - 1) // epochs, steps


def constant_schedule(step: int) -> float:
    return 1.0


def warmup_then_cosine(warmup_steps: int, total_steps: int, warmup_factor: float) -> Callable[[int], float]:
    """lr factor: `warmup_factor` for the first `warmup_steps` steps, then cosine from 1 to 0
    over the remaining steps."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return warmup_factor
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor
