"""Optimizer recipes shared by methods (each client-round builds a fresh one).

Two learning-rate policies live here, and a table should not mix them for methods it
compares (each method states its own in `lr_schedule`, shown by `fedbench methods
--describe NAME`):

- `sgd_per_client_cosine`: the FedTPG harness's (FedTPG, FedMVP and the baselines the two
  papers ran in it). Every client owns a cosine over the *rounds* that advances once per
  round the client trains in; a client-round runs at one lr throughout.
- `sgd_with_cosine`: CoOp's (Dassl's) recipe, a cosine over the local steps of each
  client-round, restarted every round.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import lightning as L
import torch

PER_CLIENT_COSINE = (
    "FedTPG harness: SGD at lr * (1 + cos(pi * p / R)) / 2 for the whole client-round, p = rounds this "
    "client trained in before, R = rounds (a per-client cosine over rounds, not restarted per round)"
)
COSINE_OVER_LOCAL_STEPS = "SGD, cosine from lr to 0 over each client-round's local steps (restarted every round)"


def per_client_cosine_lr(base_lr: float, participations: int, rounds: int) -> float:
    """The lr of a client's round under the FedTPG harness: the client's own
    CosineAnnealingLR(T_max = rounds, eta_min = 0), built once and stepped once after every
    round the client trains in (FedTPG's and FedMVP's `client.train` -> `update_lr`). Its
    round number `participations` + 1 (0 earlier rounds: `base_lr`) runs at
    base_lr * (1 + cos(pi * participations / rounds)) / 2. With every client in every round
    that is the round index; under partial participation a client's schedule lags the
    federation's round counter, as the authors' does. `rounds` 0 (a federation of unknown
    length: a lone client-round, `fedbench bench`) gives `base_lr`."""
    if participations < 0 or rounds < 0:
        raise ValueError(f"participations and rounds must be >= 0, got {participations} and {rounds}")
    if rounds == 0:
        return base_lr
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * participations / rounds))


def sgd_per_client_cosine(
    module: L.LightningModule,
    params: Iterable,
    lr: float,
    momentum: float = 0.9,
    weight_decay: float = 1e-5,
) -> torch.optim.SGD:
    """The FedTPG harness's recipe (`PER_CLIENT_COSINE`): SGD at `per_client_cosine_lr` of
    the current client (`module.current_client`: its earlier participations and the
    federation's rounds, set by the simulator), constant over the client-round's steps.
    The optimizer is fresh every client-round (this suite's rule), so unlike the authors'
    per-client SGD no momentum carries over between a client's rounds."""
    client = module.current_client
    rate = per_client_cosine_lr(lr, client.participations, client.rounds)
    return torch.optim.SGD(list(params), lr=rate, momentum=momentum, weight_decay=weight_decay)


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
