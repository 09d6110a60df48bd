"""Executed FLOPs: what a run's forward and backward passes cost, counted by torch.

Counting uses torch's own FLOP formulas (`torch.utils.flop_counter`: matrix products,
convolutions, attention kernels; 2 FLOPs per multiply-add; elementwise work is not
counted) in a lean dispatch mode, plus formulas for three kernels torch's table lacks and
that CLIP runs: CPU flash attention (forward and backward) and the fused
`_native_multi_head_attention` that `nn.MultiheadAttention` takes in a frozen tower
without gradients. Without them a frozen image tower's attention would count as zero.

Counting costs Python time per operation, not per FLOP (a toy-CLIP training step takes
~3x longer counted), so a run counts a sample of its training steps and reuses it:
a step's cost is a function of its *kind* -- (the client's class list, batch size, first
step of a client-round or not, the method's discrete state such as pFedMoAP's expert
count); clients that classify over the same classes (base-to-novel: all base classes) share kinds --
so each kind is counted the first time it runs and charged at that count afterwards.
A first step includes once-per-client-round work (pFedMoAP's experts) and the filling of
a method's caches that outlive the client-round (frozen template texts), so those are
charged at every client-round's first step: at most one text encoding of the client's
classes too much per client-round. Evaluation batches are sampled the same way: their
kind is the shapes of the batch and of the class features (and the discrete state),
because some methods classify by many small operations (FedOTP's transport plan: up to
100 Sinkhorn iterations a batch), whose counting costs Python time per operation; the
sampled evaluation count equals the count of every batch for every built-in method
(`tests/core/test_flops.py`). Frozen-feature passes and class encodings in evaluation are
counted whole.

`ledger()` opens the account of one run; `charge(part)` counts the code inside into it
(nothing when no ledger is open); `charge_kind(part, kind)` counts it once per kind;
`TrainSteps` and `evaluation_kinds` name the kinds of training steps and evaluation batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from benchmark.host_values import HostMemo

aten = torch.ops.aten


def _shape(t) -> tuple[int, ...]:
    return tuple(t.shape)


def _cpu_flash_attention(query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_flop_count(_shape(query), _shape(key), _shape(value))


def _cpu_flash_attention_backward(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_backward_flop_count(_shape(grad_out), _shape(query), _shape(key), _shape(value))


def _native_multi_head_attention(query, key, value, embed_dim, num_heads, *args, out_val=None, **kwargs) -> int:
    """Input projections, QK^T, attention x V and the output projection of one fused call
    (batch-first [B, L, E]; a 2-D input is one sequence)."""
    q, k = _shape(query), _shape(key)
    batch = q[0] if len(q) == 3 else 1
    lq, lk, e = q[-2], k[-2], int(embed_dim)
    projections = 2 * batch * e * e * (lq + 2 * lk) + 2 * batch * lq * e * e
    attention = 2 * 2 * batch * lq * lk * e
    return projections + attention


def _mv(matrix, vector, *args, out_val=None, **kwargs) -> int:
    m, n = _shape(matrix)
    return 2 * m * n


def _addmv(bias, matrix, vector, *args, out_val=None, **kwargs) -> int:
    return _mv(matrix, vector)


def _dot(a, b, *args, out_val=None, **kwargs) -> int:
    return 2 * a.numel()


# The formulas, by op: torch's (which take shapes) and ours (which take the tensors).
_FORMULAS: dict[Any, Callable[..., int]] = {
    **flop_registry,
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_attention_backward,
    aten._native_multi_head_attention: _native_multi_head_attention,
    aten.mv: _mv,
    aten.addmv: _addmv,
    aten.dot: _dot,
}


class FlopCounter(TorchDispatchMode):
    """Counts the FLOPs of every operation run inside it into `totals[part]`, where `part`
    is the innermost `attribute_to` (so nested counting never counts an operation twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.totals: dict[str, int] = {}
        self.parts: list[str] = ["total"]

    @property
    def total(self) -> int:
        return sum(self.totals.values())

    @contextlib.contextmanager
    def attribute_to(self, part: str) -> Iterator[None]:
        self.parts.append(part)
        try:
            yield
        finally:
            self.parts.pop()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = _FORMULAS.get(func._overloadpacket)
        if formula is not None:
            part = self.parts[-1]
            self.totals[part] = self.totals.get(part, 0) + int(formula(*args, **kwargs, out_val=out))
        return out


def count_flops(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, int]:
    """(fn(*args, **kwargs), the FLOPs it executed)."""
    with FlopCounter() as counter:
        result = fn(*args, **kwargs)
    return result, counter.total


@dataclass
class FlopLedger:
    """The executed FLOPs of one run, by part: "train" (local training steps), "evaluation"
    (scoring clients), "features" (frozen image features and prefixes, computed once and
    shared)."""

    totals: dict[str, int] = field(default_factory=dict)
    steps: int = 0  # training steps run
    steps_counted: int = 0  # of which counted (the rest charged at their kind's count)
    sample_steps: bool = True  # False: count every training step (to check the sampling)
    _kinds: dict[tuple, int] = field(default_factory=dict)
    _counter: FlopCounter | None = None

    def add(self, part: str, flops: int) -> None:
        self.totals[part] = self.totals.get(part, 0) + int(flops)

    @contextlib.contextmanager
    def counting(self, part: str) -> Iterator[None]:
        """Count everything inside into `part` (inside another `counting`: into `part` only)."""
        if self._counter is not None:
            with self._counter.attribute_to(part):
                yield
            return
        self._counter = counter = FlopCounter()
        try:
            with counter, counter.attribute_to(part):
                yield
        finally:
            self._counter = None
            for name, flops in counter.totals.items():
                self.add(name, flops)

    def summary(self) -> dict[str, int]:
        parts = {name: self.totals.get(name, 0) for name in ("train", "evaluation", "features")}
        return {**parts, "total": sum(self.totals.values())}


_LEDGER: ContextVar[FlopLedger | None] = ContextVar("fedbench_flop_ledger", default=None)
_ENABLED: ContextVar[bool] = ContextVar("fedbench_flop_counting", default=True)


@contextlib.contextmanager
def off() -> Iterator[None]:
    """Runs inside count nothing (their ledgers stay empty): to time the code without the
    counting's own cost (`fedbench bench`)."""
    token = _ENABLED.set(False)
    try:
        yield
    finally:
        _ENABLED.reset(token)


@contextlib.contextmanager
def ledger(sample_steps: bool = True) -> Iterator[FlopLedger]:
    """Open the FLOP account of a run: `charge` and `TrainSteps` inside count into it
    (nothing under `off()`)."""
    account = FlopLedger(sample_steps=sample_steps)
    token = _LEDGER.set(account if _ENABLED.get() else None)
    try:
        yield account
    finally:
        _LEDGER.reset(token)


def current() -> FlopLedger | None:
    return _LEDGER.get()


@contextlib.contextmanager
def charge(part: str) -> Iterator[None]:
    """Count the code inside into the open ledger's `part`; nothing when none is open."""
    account = _LEDGER.get()
    if account is None:
        yield
        return
    with account.counting(part):
        yield


@contextlib.contextmanager
def charge_kind(part: str, kind: Hashable | None) -> Iterator[bool]:
    """Like `charge`, but code of a `kind` already counted in this run is charged at that
    count instead of being counted again (unless the ledger counts every step). A `kind` of
    None (unknown) is always counted, and so is code inside an enclosing count. Yields
    whether it counts."""
    account = _LEDGER.get()
    if account is None:
        yield False
        return
    key, outermost = (part, kind), account._counter is None
    if outermost and kind is not None and account.sample_steps and key in account._kinds:
        account.add(part, account._kinds[key])
        yield False
        return
    before = account.totals.get(part, 0)
    with account.counting(part):
        yield True
    if outermost and kind is not None:
        account._kinds[key] = account.totals.get(part, 0) - before


class _Unknown(Exception):
    pass


def shapes(value: Any) -> Hashable | None:
    """What the FLOPs of operations on `value` can depend on: the shapes and dtypes of its
    tensors and the values of everything else, through tuples, lists, dicts and
    dataclasses. None if it holds anything else (unknown: to be counted)."""
    try:
        return _shapes(value)
    except _Unknown:
        return None


def _shapes(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_shapes(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _shapes(v)) for k, v in value.items()))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(_shapes(getattr(value, f.name)) for f in dataclasses.fields(value)))
    raise _Unknown(type(value).__name__)


def evaluation_kinds(module: torch.nn.Module, classes: Any) -> Callable[[Any], Hashable | None]:
    """The kind of each evaluation batch scored against `classes`: what its FLOPs can depend
    on (None: count it, or no ledger is open, where no kind is needed). The class features'
    shapes and the method's discrete state are read once: evaluation changes neither."""
    class_features = shapes(classes) if _LEDGER.get() is not None else None
    if class_features is None:
        return lambda inputs: None
    fixed = ("evaluation", class_features, discrete_state(module))

    def kind(inputs: Any) -> Hashable | None:
        batch = shapes(inputs)
        return None if batch is None else (*fixed, batch)

    return kind


def discrete_state(module: torch.nn.Module) -> tuple:
    """The values of a method's small integer and boolean state tensors (pFedMoAP's
    expert count, FedMVP's LoRA switch): what changes the work of a step between rounds."""
    items = []
    for name, tensor in module.state_dict(keep_vars=True).items():  # the tensors themselves: memo keys
        if not (tensor.is_floating_point() or tensor.is_complex()) and tensor.numel() <= 64:
            items.append((name, _VALUES(tensor)))
    return tuple(items)


# Read on the host once per loaded state, not at every step (a sync on CUDA: `host_values`).
_VALUES = HostMemo(lambda tensor: tuple(tensor.detach().reshape(-1).tolist()))


class TrainSteps:
    """Charges each training step of one client-round to the open ledger's "train": counted
    the first time a step of its kind runs (module docstring), its kind's count afterwards.
    A training step is forward, backward and optimizer step (`benchmark.federation.client_loop`)."""

    def __init__(self, class_names: tuple[str, ...], module: torch.nn.Module | None = None) -> None:
        self.class_names = tuple(class_names)
        self._account = current()
        if self._account is not None and module is not None:
            discrete_state(module)  # read on the host here, before the steps (memoized: `_VALUES`)

    def step(self, module: torch.nn.Module, batch, first: bool) -> contextlib.AbstractContextManager:
        """The context one training step runs in."""
        return _UNCOUNTED if self._account is None else self._counted(module, batch, first)

    @contextlib.contextmanager
    def _counted(self, module: torch.nn.Module, batch, first: bool) -> Iterator[None]:
        account = self._account
        size = len(batch[-1]) if isinstance(batch, (tuple, list)) else len(batch)
        kind = (self.class_names, size, first, discrete_state(module))
        account.steps += 1
        with charge_kind("train", kind) as counted:
            yield
        account.steps_counted += counted


_UNCOUNTED = contextlib.nullcontext()  # reusable: no ledger open (`off()`, or outside a run)
