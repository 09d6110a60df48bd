"""Local training of one client-round: the method's LightningModule hooks, run by one
Lightning Fabric that lives as long as the federation.

A Lightning Trainer per client-round took 30 % of a tiny-CLIP client-round (6 of 20 ms:
its setup and per-batch machinery); `fedbench bench` prints the share that is left. What
a client-round computes is the Trainer's, bit for bit (`tests/federation/test_client_loop.py` trains
every method both ways):

- `configure_optimizers` runs at the start of every client-round, so every client gets a
  fresh optimizer and scheduler; what it returns is read as a Trainer reads it
  (`benchmark.federation.configured_optimizers`). (Run option
  optimizer_state = shared keeps the first client-round's for every later one: the
  official pFedMMA code's rule, offered to show what the paper's numbers depend on.)
- Automatic optimization, per batch: `training_step`, zero the gradients, backward,
  optimizer step, then the "step"-interval schedulers ("epoch" ones after each epoch).
  A `training_step` that returns None skips its backward, as in Lightning.
- Manual optimization (`automatic_optimization = False`): `training_step` does it all
  through `self.optimizers()` and `self.manual_backward`, which Lightning routes to this
  Fabric and its precision (autocast, the fp16 gradient scaler).
- `self.trainer` is this Fabric: `max_epochs`, `current_epoch`, `global_step`,
  `num_training_batches` and `estimated_stepping_batches` mean what they mean on a Trainer.
- `self.log(name, value)` adds to a per-epoch mean weighted by the batch size (the
  Trainer's reduction for `on_epoch=True`); the round's loss is the last epoch's mean of
  "train_loss". The round also reports the lr it started at: the first optimizer's first
  parameter group's, after `configure_optimizers` (and any scheduler it built) set it.
- Module hooks called, in the Trainer's order (on_train_batch_start returning -1 ends
  the epoch): on_fit_start, on_train_start,
  on_train_epoch_start, on_train_batch_start, on_before_zero_grad, on_before_backward,
  on_after_backward, on_before_optimizer_step, on_train_batch_end, on_train_epoch_end,
  on_train_end, on_fit_end. A method overriding any other Lightning hook a Trainer's fit
  would call is refused when it is registered (`UNCALLED_HOOKS`), never silently skipped.

All of this is the method contract's Lightning part (`benchmark.method_contract.LIGHTNING`, shown by
`fedbench methods --describe`); `tests/core/test_method.py` fails when a loop reads anything
of a method that the contract does not declare.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sized

import lightning as L
import numpy as np
import torch

from benchmark import flops
from benchmark.federation.configured_optimizers import read_configured


@dataclass
class ClientRoundTraining:
    """What one client-round's local training returns."""

    loss: float  # "train_loss" as the method logged it, mean over the last epoch (nan: never logged)
    model_seconds: float  # training steps: forward, backward, optimizer step
    data_seconds: float  # fetching and collating the batches (decoding and augmenting images)
    optimizer_seconds: float  # the method's configure_optimizers: its fresh optimizer and scheduler
    lr: float | None = None  # `round_lr` of its steps (None: no optimizer, or no step taken)


def round_lr(step_lrs: list[float]) -> float | None:
    """What a client-round reports as its lr (metrics.csv's `lr`; W&B's `lr/mean`, `lr/min`,
    `lr/max` over the round's clients): the mean of the lr its optimizer steps used, read from
    the first optimizer's first parameter group just before each step. Not the lr it started
    at: a schedule restarted every client-round starts each one at the same value (CoOp's
    warm-up lr), whatever the steps then used."""
    return math.fsum(step_lrs) / len(step_lrs) if step_lrs else None


class LocalTrainingFabric(L.Fabric):
    """The Fabric a method sees as `self.trainer` during local training; the facts of the
    client-round a Trainer would give, and `self.log` kept as per-epoch means."""

    def __init__(self, accelerator: str, precision: str) -> None:
        super().__init__(accelerator=accelerator, devices=1, precision=precision, loggers=[])
        self.max_epochs = 1
        self.current_epoch = 0
        self.global_step = 0  # optimizer steps taken this client-round
        self.num_training_batches = 0
        self.batch_images = 0  # the current batch's size: the weight of what `self.log` records
        self._sums: dict[str, tuple[torch.Tensor, int]] = {}

    @property
    def estimated_stepping_batches(self) -> int:
        return self.num_training_batches * self.max_epochs

    @property
    def scales_gradients(self) -> bool:
        """Whether the precision has a gradient scaler (fp16 on CUDA): its optimizer steps go
        through Fabric, which a loop stepping optimizers itself cannot do."""
        return getattr(self._precision, "scaler", None) is not None

    def log_dict(self, metrics, step=None) -> None:
        # Lightning's on_epoch mean: sum of value x batch size over the epoch, divided by the
        # summed batch size, accumulated in float32 (or float64) tensors as the Trainer does.
        for name, value in metrics.items():
            value = torch.as_tensor(value).detach()
            if value.dtype not in (torch.float32, torch.float64):
                value = value.to(torch.get_default_dtype())
            total, count = self._sums.get(name, (torch.tensor(0.0, device=value.device), 0))
            self._sums[name] = (total + value * self.batch_images, count + self.batch_images)

    def epoch_mean(self, name: str) -> float:
        if name not in self._sums:
            return float("nan")
        return epoch_mean(*self._sums[name])


def epoch_mean(total: torch.Tensor, count: int) -> float:
    """Lightning's on_epoch mean, `total` (sum of value x batch size) / `count` (images):
    its float32 (or float64) tensor / int64 tensor, without a tensor operation (IEEE
    division is correctly rounded, so numpy's float32 division gives its bits)."""
    value = total.item()
    return float(np.float32(value) / np.float32(count)) if total.dtype == torch.float32 else value / count


class NonFiniteLoss(ArithmeticError):
    """A training step's loss was NaN or infinite (`step`: optimizer steps taken by then,
    `lr`: the learning rate after it). Local training stops at the end of that epoch, or
    at once if a later step fails (NaN parameters can make later steps raise)."""

    def __init__(self, value: float, step: int, lr: float | None) -> None:
        super().__init__(f"the training loss is {value}")
        self.value, self.step, self.lr = value, step, lr


class ClientLoop:
    """Runs the local training of client-rounds on one device and precision. `shared_optimizer`:
    `configure_optimizers` runs once and its optimizers and schedulers are stepped in every
    later client-round too (run option optimizer_state = shared, the official pFedMMA code's
    rule: one SGD for all clients, so one client's momentum moves the next client's personal
    parameters); otherwise each client-round starts fresh."""

    def __init__(self, accelerator: str, precision: str, shared_optimizer: bool = False) -> None:
        self.fabric = LocalTrainingFabric(accelerator, precision)
        self.precision = precision  # what the batching probe's tolerances follow
        # What `module.fabric` holds while attached (Lightning keeps a weak proxy).
        self._proxy = weakref.proxy(self.fabric)
        self.shared_optimizer = shared_optimizer
        self._shared: tuple[object, list, list] | None = None  # (module, optimizers, schedulers)

    def fit(
        self,
        module: L.LightningModule,
        batches: Sized,
        epochs: int,
        class_names: tuple[str, ...] = (),
    ) -> ClientRoundTraining:
        """Train `module` for `epochs` passes over `batches` (iterated once per epoch, its
        `sampler` told the epoch as Lightning tells it). Raises `NonFiniteLoss` for a NaN or
        infinite loss. Steps are charged to the open FLOP ledger under the client's
        `class_names`."""
        fabric = self.fabric
        fabric.max_epochs, fabric.current_epoch, fabric.global_step = epochs, 0, 0
        fabric.num_training_batches, fabric._sums = len(batches), {}
        # An evaluation between rounds leaves the module in eval mode, which would switch off
        # dropout and training-only branches (LoRA's dropout, FedMVP's LoRA path).
        module.train()
        self.attach(module)
        try:
            return self._fit(module, batches, epochs, flops.TrainSteps(class_names, module))
        finally:
            offer_optimizers(module, [])

    def attach(self, module: L.LightningModule) -> None:
        """`module.trainer` is this loop's Fabric until `release` (not per client-round: ~50 us)."""
        if module.fabric is not self._proxy:
            module.fabric = self._proxy

    def release(self, module: L.LightningModule) -> None:
        """Detach `module` from this loop's Fabric once it is done training."""
        if module.fabric is self._proxy:
            module.fabric = None

    def _optimizers(self, module) -> tuple[list, list, float]:
        """The client-round's optimizers and schedulers, and the seconds `configure_optimizers`
        took: a fresh set, or the shared one kept since the first client-round."""
        if self._shared is not None and self._shared[0] is module:
            _, optimizers, schedulers = self._shared
            offer_optimizers(module, optimizers)
            return optimizers, schedulers, 0.0
        start = time.perf_counter()
        configured = module.configure_optimizers()
        optimizer_seconds = time.perf_counter() - start
        optimizers, schedulers = self.read_optimizers(module, configured)
        if self.shared_optimizer:
            self._shared = (module, optimizers, schedulers)
        return optimizers, schedulers, optimizer_seconds

    def _fit(self, module, batches, epochs, counter) -> ClientRoundTraining:
        fabric = self.fabric
        optimizers, schedulers, optimizer_seconds = self._optimizers(module)
        step_lrs: list[float] = []  # the lr of each step (see `round_lr`)
        automatic = module.automatic_optimization
        if automatic and len(optimizers) != 1:
            raise RuntimeError(
                f"{type(module).__name__}.configure_optimizers returned {len(optimizers)} optimizers; automatic "
                "optimization takes one (set automatic_optimization = False to step several yourself)"
            )
        seconds = data_seconds = 0.0
        module.on_fit_start()
        module.on_train_start()
        for epoch in range(epochs):
            step_seconds, wait_seconds = self._epoch(
                module, batches, epoch, optimizers, schedulers, automatic, counter, step_lrs
            )
            seconds, data_seconds = seconds + step_seconds, data_seconds + wait_seconds
        module.on_train_end()
        module.on_fit_end()
        return ClientRoundTraining(
            fabric.epoch_mean("train_loss"), seconds, data_seconds, optimizer_seconds, round_lr(step_lrs)
        )

    def _epoch(
        self, module, batches, epoch, optimizers, schedulers, automatic, counter, step_lrs
    ) -> tuple[float, float]:
        """One local epoch of a client-round: its steps, the Lightning hooks around them and its
        losses checked finite once at its end. Appends each step's lr to `step_lrs`; returns the
        seconds spent in the steps and waiting for batches."""
        fabric = self.fabric
        num_batches = fabric.num_training_batches
        seconds = data_seconds = 0.0
        fabric.current_epoch = epoch
        sampler = getattr(batches, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        fabric._sums = {}
        losses: list[tuple[torch.Tensor, int, float | None]] = []
        module.on_train_epoch_start()
        try:
            batch_iterator, batch_idx = iter(batches), -1
            while True:
                start = time.perf_counter()
                batch = next(batch_iterator, None)
                data_seconds += time.perf_counter() - start
                if batch is None:
                    break
                batch_idx += 1
                batch = to_device(batch, fabric.device)
                fabric.batch_images = len(batch[-1]) if isinstance(batch, (tuple, list)) else len(batch)
                # Lightning: -1 skips this batch and the rest of the epoch, whose schedulers
                # still step as after the epoch's last batch.
                skip = module.on_train_batch_start(batch, batch_idx) == -1
                if not skip:
                    if optimizers:
                        step_lrs.append(float(optimizers[0].param_groups[0]["lr"]))
                    start = time.perf_counter()
                    with counter.step(module, batch, first=epoch == 0 and batch_idx == 0):
                        if automatic:
                            output = self._step(module, optimizers[0], batch, batch_idx)
                        else:
                            output = _manual_output(module, self._training_step(module, batch, batch_idx))
                    seconds += time.perf_counter() - start
                step_schedulers(module, schedulers, "step", batch_idx)
                if skip or batch_idx == num_batches - 1:
                    step_schedulers(module, schedulers, "epoch", epoch)
                if skip:
                    break
                loss = output.get("loss")
                if isinstance(loss, torch.Tensor):  # checked once per epoch: no device sync per step
                    lr = optimizers[0].param_groups[0]["lr"] if optimizers else None
                    losses.append((loss, fabric.global_step, lr))
                module.on_train_batch_end(output, batch, batch_idx)
        except Exception as failure:
            self.check_losses(losses, failure)
            raise
        self.check_losses(losses)
        module.on_train_epoch_end()
        return seconds, data_seconds

    @staticmethod
    def check_losses(losses, failure: Exception | None = None) -> None:
        for loss, step, lr in losses:
            finite = math.isfinite(loss.item()) if loss.numel() == 1 else bool(torch.isfinite(loss).all())
            if not finite:
                raise NonFiniteLoss(float(loss.float().mean()), step, lr) from failure

    def _training_step(self, module, batch, batch_idx):
        with self.fabric.autocast():
            return module.training_step(batch, batch_idx)

    def _step(self, module, optimizer, batch, batch_idx):
        """One automatic-optimization step, in the Trainer's order (training_step runs
        before the gradients are zeroed: Lightning's closure does it that way). Without a
        loss nothing has a gradient, so the step would change nothing: it is counted only."""
        output = self._training_step(module, batch, batch_idx)
        loss, extra = _automatic_loss(module, output)
        optimization_step(loss, optimizer, self.fabric.backward, module)
        self.fabric.global_step += 1  # Lightning counts a step without a loss too
        # What the Trainer hands on_train_batch_end: a detached copy of the loss. The step's
        # graph is freed here, inside the step, as in a loop that drops its loss.
        return {} if loss is None else {"loss": loss.detach().clone(), **extra}

    def read_optimizers(self, module, configured):
        """What `configure_optimizers` returned, read as a Trainer reads it (`configured_optimizers`)."""
        automatic = module.automatic_optimization
        owner = f"{type(module).__name__}.configure_optimizers"
        optimizers, schedulers = read_configured(configured, automatic, owner)
        if any(config.reduce_on_plateau for config in schedulers):
            raise RuntimeError(
                f"{type(module).__name__}: ReduceLROnPlateau needs a monitored metric, which local training "
                "does not have; use a schedule of the step or the epoch"
            )
        # Fabric's optimizer wrapper routes `step` through the precision plugin, which only the
        # fp16 gradient scaler needs; without one a plain step is the same step.
        scaled = self.fabric.scales_gradients
        wrapped = [self.fabric.setup_optimizers(optimizer) for optimizer in optimizers] if scaled else list(optimizers)
        if not module.automatic_optimization:  # the method steps them: count its steps as they happen
            for optimizer in optimizers:
                optimizer.register_step_post_hook(self._count_step)
        offer_optimizers(module, wrapped)
        return wrapped, schedulers

    def _count_step(self, optimizer, args, kwargs) -> None:
        self.fabric.global_step += 1


def offer_optimizers(module: L.LightningModule, optimizers: list) -> None:
    """Make `optimizers` what `self.optimizers()` returns in `module`'s hooks. Under a Fabric a
    LightningModule returns its `_fabric_optimizers`, which `Fabric.setup` sets when it wraps
    the module; local training does not wrap the module (its wrapper's forward and device moves
    are per-call costs), so it sets that attribute here, the one Lightning attribute outside the
    public API a loop writes (`tests/federation/test_client_loop.py` checks `self.optimizers()`
    under manual optimization)."""
    module._fabric_optimizers = optimizers


def optimization_step(
    loss: torch.Tensor | None,
    optimizer,
    backward: Callable[[torch.Tensor], Any],
    hooks: L.LightningModule | None = None,
) -> None:
    """The update of one automatic-optimization step, once the forward gave `loss`, in the
    Trainer's order: zero the gradients, backward, step. Every loop that trains calls it:
    the client loop (`backward` is its Fabric's, `hooks` the module, whose Lightning hooks
    around the update are called), the batched loop (`optimizer` steps the clients' stacked
    states: `benchmark.federation.batched_training`) and the bare loop `fedbench bench`
    measures (no hooks: neither loop runs a method that overrides one). Without a loss
    nothing has a gradient, so nothing is stepped (Lightning skips the backward too)."""
    if hooks is not None:
        hooks.on_before_zero_grad(optimizer)
    optimizer.zero_grad()
    if loss is None:
        return
    if hooks is not None:
        hooks.on_before_backward(loss)
    backward(loss)
    if hooks is not None:
        hooks.on_after_backward()
        hooks.on_before_optimizer_step(optimizer)
    optimizer.step()


def step_schedulers(module, schedulers, interval: str, index: int) -> None:
    """Lightning's rule: under automatic optimization, a scheduler of `interval` steps
    when its (0-based batch-in-epoch or epoch) `index` + 1 is a multiple of its frequency."""
    if not module.automatic_optimization:
        return
    for config in schedulers:
        if config.interval == interval and (index + 1) % config.frequency == 0:
            config.scheduler.step()


def _automatic_loss(module, output) -> tuple[torch.Tensor | None, dict]:
    """(loss, the other entries) of a `training_step` return under automatic optimization:
    a loss tensor, a dict with a "loss", or None (the step is skipped), as Lightning reads it."""
    if isinstance(output, torch.Tensor) or output is None:
        return output, {}
    if isinstance(output, Mapping) and output.get("loss") is not None:
        return output["loss"], {k: v for k, v in output.items() if k != "loss"}
    raise TypeError(
        f"{type(module).__name__}.training_step returned {type(output).__name__}; under automatic optimization "
        "it returns the loss tensor, a dict with the loss under 'loss', or None to skip the step"
    )


def _manual_output(module, output) -> dict:
    """What the Trainer hands on_train_batch_end under manual optimization: the dict returned
    (its "loss" detached), {"loss": loss.detach()} for a tensor, {} for None."""
    if output is None:
        return {}
    if isinstance(output, torch.Tensor):
        return {"loss": output.detach()}
    if isinstance(output, Mapping):
        return {**output, **({"loss": output["loss"].detach()} if "loss" in output else {})}
    raise TypeError(
        f"{type(module).__name__}.training_step returned {type(output).__name__}; under manual optimization it "
        "returns a tensor, a dict or nothing"
    )


def to_device(batch, device: torch.device):
    """(inputs, labels) on the training device; a no-op on the CPU."""
    if device.type == "cpu":
        return batch
    return type(batch)(x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x for x in batch)
