"""A round's clients trained in one pass.

Every client sampled in a round starts from its own state and the same download, and trains
on its own batches with a fresh optimizer: K independent computations that the client loop
runs one after the other, each a pass of small operations whose cost on a CPU or a large
GPU is per-operation overhead more than arithmetic. Here the K clients' states are stacked
along a leading dimension and each step runs once for all of them: `torch.func.vmap` over
the method's own `image_features`, `encode_class_inputs` and `classify`
(`functional_call` swaps each client's slice in), one backward through the stacked
states, and SGD applied to the stacked tensors.

What stays each client's own, as in the client loop:
- its batches, in its own seeded order (`ClientBatches`), epoch by epoch: the clients start
  every local epoch together; a client with fewer batches sits out the steps past its last
  one, untouched (no update, no momentum or weight-decay change);
- its optimizer and schedulers, built by the method's `configure_optimizers` under its own
  context (its rounds, its step count): they give the lr each of its steps takes, stepped
  exactly as the client loop steps them; the update is the client loop's
  `optimization_step` with an optimizer (`StackedSGD`) applying torch's SGD rule to the
  stacked tensors, momentum buffers per client;
- its training loss, the per-epoch mean Lightning's `self.log` would keep.

Clients whose inputs differ in shape at a step (a short last batch) run as separate groups
of that step; class lists of different lengths as separate passes (`train_together`).
Not bit-identical to training client by client (a batched matrix product may sum in
another order), so it is a run setting in a cell's identity (`RunConfig.batched_training`,
`--batched-training true`). Who may: `FederatedMethod.batched_training` and `why_not`; the
first batched round of a run probes one step against the client loop's (`probe`, through
`benchmark.federation.stacked.BatchingProbe`, which evaluation's batching uses too).
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from benchmark import flops
from benchmark.federation.client_loop import (
    ClientLoop,
    ClientRoundTraining,
    NonFiniteLoss,
    epoch_mean,
    offer_optimizers,
    optimization_step,
    round_lr,
    step_schedulers,
    to_device,
)
from benchmark.federation.stacked import batchable_attention, comparable_kernels, relative_difference, stack_states
from benchmark.host_values import device_tensor
from benchmark.method import ClientContext, FederatedMethod, State

# One batched step's losses must equal the client loop's to this relative tolerance, and its
# gradients to GRADIENT_RTOL of their largest entry: a gradient is a sum over the batch's tokens
# that cancels (pFedMMA's adapter bias on the tiny CLIP: 2e-5 apart from summing in another
# order), while one computed wrongly is off by its own size.
PROBE_RTOL = 1e-5
GRADIENT_RTOL = 1e-3
# Under mixed precision the products are rounded to the half type's unit roundoff (bf16: 2^-8 =
# 3.9e-3, fp16: 2^-11), and two summation orders differ by that much per product, not by fp32's
# rounding: the probe's tolerances scale with it (`probe_tolerances`). A wrongly batched step is
# off by its own size, far above either.
UNIT_ROUNDOFF = {"bf16-mixed": 2.0**-8, "16-mixed": 2.0**-11}


def probe_tolerances(precision: str) -> tuple[float, float]:
    """(loss, gradient) relative tolerances of the probe for a run's Lightning `precision`:
    the fp32 ones, or 4 and 32 unit roundoffs of the half type (bf16: 1.6e-2 and 0.125)."""
    unit = UNIT_ROUNDOFF.get(precision)
    if unit is None:
        return PROBE_RTOL, GRADIENT_RTOL
    return max(PROBE_RTOL, 4 * unit), max(GRADIENT_RTOL, 32 * unit)


# What the client loop calls besides training_step; a method overriding one trains client by client.
LOOP_HOOKS = (
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_train_end",
    "on_fit_end",
)
# The SGD settings `_sgd` implements; any other value of these trains client by client.
SGD_UNSUPPORTED = {"maximize": False, "differentiable": False, "fused": None}
SGD_HYPERPARAMETERS = ("momentum", "dampening", "weight_decay", "nesterov")


class BatchingRefused(RuntimeError):
    """The method's clients cannot train in one pass; the message says why."""


class ClientDiverged(ArithmeticError):
    """Client `cid`'s loss was NaN or infinite (`failure`, as the client loop raises it)."""

    def __init__(self, cid: int, failure: NonFiniteLoss) -> None:
        super().__init__(str(failure))
        self.cid, self.failure = cid, failure


def why_not(method: FederatedMethod) -> str | None:
    """Why `method`'s clients cannot train in one pass, read from its class; None if they may."""
    cls = type(method)
    if not cls.batched_training:
        return "the method does not declare batched_training"
    if not method.automatic_optimization:
        return "it uses manual optimization"
    if cls.training_step is not FederatedMethod.training_step:
        return "it overrides training_step"
    hooks = [h for h in LOOP_HOOKS if getattr(cls, h) is not getattr(L.LightningModule, h)]
    if hooks:
        return f"it overrides {', '.join(hooks)}"
    return None


@dataclass
class _Client:
    """One client of a batched round: its data, context, optimizer and what it logged."""

    cid: int
    context: ClientContext
    batches: Any  # ClientBatches: len() batches per epoch, a sampler told the epoch
    optimizer: torch.optim.SGD  # its own, never stepped: its param groups carry its lr schedule
    schedulers: list
    optimizer_seconds: float
    data_seconds: float = 0.0
    model_seconds: float = 0.0
    steps: int = 0
    step_lrs: list = field(default_factory=list)  # the lr of each of its steps (see `round_lr`)
    loss_sum: Tensor | None = None  # this epoch's sum of loss x batch size (Lightning's on_epoch mean)
    loss_count: int = 0
    losses: list = field(default_factory=list)  # this epoch's (loss, step, lr), checked at its end

    def lr(self, group: int) -> float:
        return float(self.optimizer.param_groups[group]["lr"])


class _Loss(nn.Module):
    """Forward = the default `training_step`'s loss for one client, for `functional_call`:
    cross-entropy of `classify(image_features(inputs), encode_class_inputs(classes))`."""

    def __init__(self, method: FederatedMethod) -> None:
        super().__init__()
        self.method = method

    def forward(self, inputs: Tensor, labels: Tensor, classes: tuple[Tensor, ...]) -> Tensor:
        m = self.method
        return F.cross_entropy(m.classify(m.image_features(inputs), m.encode_class_inputs(classes)), labels)


class BatchedTraining:
    """Trains a round's clients of `method` together, on `loop`'s device and precision."""

    def __init__(self, method: FederatedMethod, loop: ClientLoop) -> None:
        reason = why_not(method)
        if reason:
            raise BatchingRefused(reason)
        if loop.fabric.scales_gradients:
            raise BatchingRefused("fp16 with a gradient scaler steps client by client")
        self.method = method
        self.loop = loop
        self._loss = _Loss(method)
        self._trainable = [n for n, p in method.named_parameters() if p.requires_grad]

    def train_together(
        self, starts: Sequence[State], clients: Sequence[tuple[int, Any, ClientContext]], epochs: int
    ) -> list[tuple[State, ClientRoundTraining]]:
        """Each client's (trained state, training facts) from its start state, for `clients`
        = (id, batches, context). Clients with class lists of different lengths train in
        separate passes. Raises `ClientDiverged` for a NaN or infinite loss."""
        out: list = [None] * len(clients)
        by_length: dict[int, list[int]] = {}
        for k, (_, _, context) in enumerate(clients):
            by_length.setdefault(len(context.class_names), []).append(k)
        for members in by_length.values():
            trained = self._train([starts[k] for k in members], [clients[k] for k in members], epochs)
            for k, result in zip(members, trained):
                out[k] = result
        self.method.load_client_state(out[-1][0])  # as the client loop leaves it: the last client's state
        return out

    def _train(self, starts, clients, epochs) -> list[tuple[State, ClientRoundTraining]]:
        method, device = self.method, self.loop.fabric.device
        members = [self._client(cid, batches, context, epochs) for cid, batches, context in clients]
        groups = _param_groups(method, members)
        stacked = {k: v.to(device) for k, v in stack_states(starts).items()}
        params = {k: stacked[k].requires_grad_() for k in groups}
        sgd = StackedSGD(params, groups, members, device)
        method.train()
        classes = tuple(t.to(device) for t in method.class_inputs([c.context.class_names for c in members]))
        counter = flops.TrainSteps(tuple(c.context.class_names for c in members), method)
        for epoch in range(epochs):
            self.loop.fabric.current_epoch = epoch
            iterators = []
            for c in members:
                c.batches.sampler.set_epoch(epoch)
                c.loss_sum, c.loss_count, c.losses = None, 0, []
                iterators.append(iter(c.batches))
            try:
                self._epoch(epoch, members, iterators, stacked, sgd, classes, counter)
            except Exception as failure:  # NaN parameters can make a later step raise: name the cause
                _check_losses(members, failure)
                raise
            _check_losses(members)
        results = []
        for k, c in enumerate(members):
            state = {name: tensor[k].detach().clone() for name, tensor in stacked.items()}
            loss = float("nan") if c.loss_sum is None else epoch_mean(c.loss_sum, c.loss_count)
            results.append(
                (
                    state,
                    ClientRoundTraining(
                        loss, c.model_seconds, c.data_seconds, c.optimizer_seconds, round_lr(c.step_lrs)
                    ),
                )
            )
        return results

    def _epoch(self, epoch, members, iterators, stacked, sgd: "StackedSGD", classes, counter) -> None:
        """One local epoch of every member, step by step; a member past its last batch sits out."""
        method, device = self.method, self.loop.fabric.device
        for batch_idx in range(max(len(c.batches) for c in members)):
            active = [k for k, c in enumerate(members) if batch_idx < len(c.batches)]
            batches = []
            for k in active:
                start = time.perf_counter()
                batch = next(iterators[k])
                members[k].data_seconds += time.perf_counter() - start
                batches.append(to_device(batch, device))
            start = time.perf_counter()
            # The FLOP ledger keys a step by its class lists and its images.
            with counter.step(method, (torch.cat([b[1] for b in batches]),), first=epoch == 0 and batch_idx == 0):
                losses = self._losses(stacked, active, batches, classes)
                sgd.active = active
                optimization_step(torch.stack(losses).sum(), sgd, torch.Tensor.backward)  # the client loop's update
            seconds = time.perf_counter() - start
            for k, batch, loss in zip(active, batches, losses):
                c = members[k]
                c.model_seconds += seconds / len(active)
                c.steps += 1
                c.step_lrs.append(c.lr(0))  # the step's lr: its schedulers step below
                value, size = loss.detach(), len(batch[-1])
                c.loss_sum = (torch.tensor(0.0, device=device) if c.loss_sum is None else c.loss_sum) + value * size
                c.loss_count += size
                with _optimizer_stepped_by_stacked_sgd():
                    step_schedulers(method, c.schedulers, "step", batch_idx)
                    if batch_idx == len(c.batches) - 1:
                        step_schedulers(method, c.schedulers, "epoch", epoch)
                c.losses.append((value, c.steps, c.lr(0)))

    def _client(self, cid: int, batches, context: ClientContext, epochs: int) -> _Client:
        """The client's optimizer and schedulers, built as the client loop builds them."""
        method, fabric = self.method, self.loop.fabric
        fabric.max_epochs, fabric.current_epoch, fabric.global_step = epochs, 0, 0
        fabric.num_training_batches = len(batches)
        self.loop.attach(method)
        method.set_client(context)
        try:
            start = time.perf_counter()
            configured = method.configure_optimizers()
            seconds = time.perf_counter() - start
            optimizers, schedulers = self.loop.read_optimizers(method, configured)
        finally:
            method.set_client(None)
            offer_optimizers(method, [])
        if len(optimizers) != 1 or type(optimizers[0]) is not torch.optim.SGD:
            names = ", ".join(type(o).__name__ for o in optimizers) or "nothing"
            raise BatchingRefused(f"its configure_optimizers returns {names}, not one torch.optim.SGD")
        for group in optimizers[0].param_groups:
            off = [k for k, v in SGD_UNSUPPORTED.items() if group.get(k, v) != v]
            if off:
                raise BatchingRefused(f"its SGD sets {', '.join(off)}")
        return _Client(cid, context, batches, optimizers[0], schedulers, seconds)

    def _losses(self, stacked: State, active: list[int], batches: list, classes: tuple) -> list[Tensor]:
        """The `active` clients' losses on their `batches`, one vmapped pass per input shape."""
        shapes: dict[tuple, list[int]] = {}
        for j, batch in enumerate(batches):
            shapes.setdefault(tuple(batch[0].shape), []).append(j)
        losses: list = [None] * len(active)
        device = batches[0][1].device
        with self.loop.fabric.autocast(), batchable_attention():
            for positions in shapes.values():
                rows = device_tensor([active[j] for j in positions], device)
                state = {f"method.{k}": v.index_select(0, rows) for k, v in stacked.items()}
                inputs = torch.stack([batches[j][0] for j in positions])
                labels = torch.stack([batches[j][1] for j in positions])
                own = tuple(t.index_select(0, rows) for t in classes)
                out = vmap(self._one_loss)(state, inputs, labels, own)
                for j, loss in zip(positions, out.unbind(0)):
                    losses[j] = loss
        return losses

    def _one_loss(self, state: State, inputs: Tensor, labels: Tensor, classes: tuple) -> Tensor:
        return functional_call(self._loss, state, (inputs, labels, classes), strict=False)


# torch's warning on a client's first scheduler step: its optimizer never steps (`StackedSGD`
# applies its rule to the stacked state, reading the lr the scheduler sets), so the order it
# warns of does not arise.
_SCHEDULER_BEFORE_OPTIMIZER = r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`"


@contextmanager
def _optimizer_stepped_by_stacked_sgd():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_SCHEDULER_BEFORE_OPTIMIZER, category=UserWarning)
        yield


def _check_losses(members: list[_Client], failure: Exception | None = None) -> None:
    """The client loop's end-of-epoch check, for each member in turn: the first whose loss
    was NaN or infinite raises `ClientDiverged`."""
    for c in members:
        try:
            ClientLoop.check_losses(c.losses, failure)
        except NonFiniteLoss as bad:
            raise ClientDiverged(c.cid, bad) from bad


def _param_groups(method: FederatedMethod, members: list[_Client]) -> dict[str, tuple[int, dict]]:
    """Parameter name -> (its param group's index, that group's SGD settings) for the
    parameters the optimizers step; every client's optimizer must group them alike."""
    names = {id(p): n for n, p in method.named_parameters()}
    layout = None
    for c in members:
        found = {
            names[id(p)]: (g, {k: group[k] for k in SGD_HYPERPARAMETERS})
            for g, group in enumerate(c.optimizer.param_groups)
            for p in group["params"]
        }
        if layout is not None and found != layout:
            raise BatchingRefused("its clients' optimizers group the parameters or set SGD differently")
        layout = found
    return layout or {}


class StackedSGD:
    """The optimizer `optimization_step` steps in a batched round: torch.optim.SGD's rule over
    the stacked parameters `params`, on the rows of the `active` clients (set before each
    step), each at its own client's lr; momentum buffers per client (row)."""

    def __init__(
        self, params: dict[str, Tensor], groups: dict[str, tuple[int, dict]], members: list[_Client], device
    ) -> None:
        self.params, self.groups, self.members, self.device = params, groups, members, device
        self.momentum: dict[str, Tensor] = {}
        self.active: list[int] = []

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        rows = device_tensor(self.active, self.device)
        for name, (group, settings) in self.groups.items():
            lrs = [self.members[k].lr(group) for k in self.active]
            _sgd(self.params[name], self.momentum, name, rows, lrs, settings)


def _sgd(p: Tensor, momentum: dict[str, Tensor], name: str, rows: Tensor, lrs: list[float], group: dict) -> None:
    """torch.optim.SGD's rule (its single-tensor form) on rows `rows` of the stacked parameter
    `p`, each row at its own lr; the other rows and their momentum are left as they are."""
    grad, param = p.grad.index_select(0, rows), p.detach().index_select(0, rows)
    if group["weight_decay"] != 0:
        grad = grad.add(param, alpha=group["weight_decay"])
    if group["momentum"] != 0:
        buf = momentum.get(name)
        if buf is None:  # every client's first step is the round's first: all rows start together
            buf = momentum[name] = torch.zeros_like(param.new_empty(p.shape))
            moved = grad.clone()
        else:
            moved = buf.index_select(0, rows).mul_(group["momentum"]).add_(grad, alpha=1 - group["dampening"])
        buf.index_copy_(0, rows, moved)
        grad = grad.add(moved, alpha=group["momentum"]) if group["nesterov"] else moved
    if len(set(lrs)) == 1:
        param.add_(grad, alpha=-lrs[0])
    else:
        shape = (len(lrs),) + (1,) * (param.dim() - 1)
        param.add_(grad * device_tensor([-lr for lr in lrs], param.device, param.dtype).view(shape))
    p.detach().index_copy_(0, rows, param)


def probe(
    training: BatchedTraining, starts: Sequence[State], clients: Sequence[tuple[int, Any, ClientContext]]
) -> str | None:
    """Why one batched step cannot stand in for the client loop's (an error, or a loss or
    gradient differing beyond the run precision's tolerance, `probe_tolerances`, on the
    clients' first batches), or None when it can. Compares up to two clients of equal class
    counts, both sides on the same kernels (`comparable_kernels`); their batches are left at
    epoch 0."""
    with comparable_kernels():
        return _probe(training, starts, clients)


def _probe(training, starts, clients) -> str | None:
    method, loop = training.method, training.loop
    loss_rtol, gradient_rtol = probe_tolerances(loop.precision)
    device = loop.fabric.device
    width = len(clients[0][2].class_names)
    chosen = [k for k, (_, _, context) in enumerate(clients) if len(context.class_names) == width][:2]
    saved = method.client_state()
    try:
        batches = []
        for k in chosen:
            clients[k][1].sampler.set_epoch(0)
            batches.append(to_device(next(iter(clients[k][1])), device))
            clients[k][1].sampler.set_epoch(0)
        names = [clients[k][2].class_names for k in chosen]
        stacked = {k: v.to(device) for k, v in stack_states([starts[k] for k in chosen]).items()}
        trainable = {k: stacked[k].requires_grad_() for k in training._trainable}
        method.train()
        classes = tuple(t.to(device) for t in method.class_inputs(names))
        together = training._losses(stacked, list(range(len(chosen))), batches, classes)
        grads = torch.autograd.grad(torch.stack(together).sum(), list(trainable.values()), allow_unused=True)
        loop.attach(method)
        for row, (k, batch) in enumerate(zip(chosen, batches)):
            method.load_client_state(starts[k])
            method.set_client(clients[k][2])
            try:
                loop.fabric.batch_images = len(batch[-1])
                with loop.fabric.autocast():
                    alone = method.training_step(batch, 0)
            finally:
                method.set_client(None)
            own = dict(method.named_parameters())
            alone_grads = torch.autograd.grad(alone, [own[n] for n in trainable], allow_unused=True)
            pairs = [("the loss", together[row], alone, loss_rtol)]
            pairs += [
                (f"the gradient of {n}", None if g is None else g[row], a, gradient_rtol)
                for n, g, a in zip(trainable, grads, alone_grads)
            ]
            for what, b, a, rtol in pairs:
                if (a is None) != (b is None):
                    return f"{what} of client {clients[k][0]} is missing on one side"
                difference = None if a is None else relative_difference(b, a, rtol)
                if difference is not None:
                    return f"{what} of client {clients[k][0]} differs from the client loop's by {difference:.1e} (relative)"
    except BatchingRefused as refused:
        return str(refused)
    finally:  # any other error (vmap refuses random ops, .item()): BatchingProbe reports it
        method.load_client_state(saved)
    return None
