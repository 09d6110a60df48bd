"""Many clients' states as one: stacked along a leading dimension, for `torch.func.vmap`
over a method's hooks (evaluation and training of a round's clients in one pass), and
the one rule both follow when batching cannot stand in for client by client: probe once,
then fall back with a warning (`BatchingProbe`)."""

from __future__ import annotations

import contextlib
import warnings
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from benchmark.method import FederatedMethod, State


@contextlib.contextmanager
def batchable_attention() -> Iterator[None]:
    """Attention as matrix products and a softmax, which vmap batches: vmap has no rule for
    CPU's fused attention kernel nor for nn.MultiheadAttention's inference fast path, and
    runs those one client at a time (a "performance drop" warning)."""
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)


@contextlib.contextmanager
def comparable_kernels() -> Iterator[None]:
    """Both sides of the probe on the same kernels: attention as matrix products (what the
    vmapped side runs, `batchable_attention`) and no TF32 (a one-by-one step on cuDNN's TF32
    convolutions against a batched one without would differ by TF32's rounding, 1e-3)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with batchable_attention():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def stack_states(states: Sequence[State]) -> State:
    """The clients' states stacked along a new leading dimension, key by key."""
    return {k: torch.stack([s[k] for s in states]) for k in states[0]}


def relative_difference(got: Tensor, want: Tensor, rtol: float) -> float | None:
    """None when `got` equals `want` to `rtol` of `want`'s largest entry (and elementwise);
    else their largest difference relative to that entry: what a batching probe reports."""
    got, want = got.detach().float(), want.detach().float()
    scale = want.abs().max().clamp_min(1e-12).item()
    if torch.allclose(got, want, rtol=rtol, atol=rtol * scale):
        return None
    return (got - want).abs().max().item() / scale


def failure_line(exc: Exception) -> str:
    """An exception as a probe reports it: its class and the first line of its message
    (vmap refuses what it cannot batch with an error)."""
    return f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


class BatchingProbe:
    """Probe once, then fall back with a warning: the rule of batched training and batched
    evaluation alike. `allows(check)` runs `check` the first time (its reason, or any error
    it raises -- vmap refuses what it cannot batch with an error -- refuses batching) and
    answers the same verdict after; `refuse(reason)` refuses it from then on. A refusal warns
    once: "method 'm': its clients `fallback`, not in one batched pass (reason)`hint`"."""

    def __init__(self, method: FederatedMethod, fallback: str, hint: str = "") -> None:
        self.method, self.fallback, self.hint = method, fallback, hint
        self.probed = False
        self.refused: str | None = None

    def allows(self, check: Callable[[], str | None]) -> bool:
        if self.refused is None and not self.probed:
            self.probed = True
            try:
                reason = check()
            except Exception as exc:  # any error means client by client
                reason = failure_line(exc)
            if reason is not None:
                self.refuse(reason)
        return self.refused is None

    def refuse(self, reason: str) -> None:
        self.refused = reason
        warnings.warn(
            f"method {self.method.name!r}: its clients {self.fallback}, not in one batched pass ({reason}){self.hint}",
            stacklevel=3,
        )
