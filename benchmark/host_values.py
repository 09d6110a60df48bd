"""Host values of device tensors, read once per tensor instead of once per step.

On CUDA every read of a device value on the host (`int(t)`, `.item()`, `.cpu()`) waits for
the kernels queued before it, so a step that reads one cannot run ahead of the GPU. What a
step needs on the host is mostly a function of tensors that do not change between steps
(a prompt's token ids, the frozen logit scale, a method's expert count): `HostMemo` reads it
the first time and hands the same value back while the tensor is the same object at the
same version (an in-place write, `load_state_dict`'s copy included, bumps the version, and
the value is read again). Exact: the value is the one a fresh read would give.
"""

from __future__ import annotations

import weakref
from typing import Callable, Generic, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


class HostMemo(Generic[T]):
    """`memo(tensor)`: `compute(tensor)`, computed once per (tensor object, version)."""

    def __init__(self, compute: Callable[[Tensor], T]) -> None:
        self.compute = compute
        self._entries: dict[int, tuple[weakref.ref, int | None, T]] = {}

    def __call__(self, tensor: Tensor) -> T:
        key, version = id(tensor), _version(tensor)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is tensor and entry[1] == version:
            return entry[2]
        value = self.compute(tensor)
        # The entry leaves with its tensor (before its id can be reused by another object).
        ref = weakref.ref(tensor, lambda _, key=key, entries=self._entries: entries.pop(key, None))
        self._entries[key] = (ref, version, value)
        return value


def _version(tensor: Tensor) -> int | None:
    """The tensor's version counter; None for an inference tensor, which has none: its value
    is read once (what is memoized -- token ids, frozen weights -- is never written in place)."""
    return None if tensor.is_inference() else tensor._version


def reads_wait(device: torch.device) -> bool:
    """Whether reading a value of `device` on the host waits for the device (CUDA and the
    other accelerators: yes; the CPU: no, its values are already there). Code with a
    data-dependent loop (FedOTP's Sinkhorn stopping) takes its sync-free form where this
    is true; tests/federation/test_host_syncs.py makes it true on the CPU to check that form."""
    return torch.device(device).type != "cpu"


def device_tensor(values, device: torch.device, dtype: torch.dtype | None = None) -> Tensor:
    """`torch.tensor(values, dtype=dtype, device=device)` without waiting for the device: a
    plain host-to-device copy of pageable memory blocks until every queued kernel is done,
    so the values are put in pinned memory and copied without blocking (CUDA only)."""
    host = torch.tensor(values, dtype=dtype)
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
