"""What a run computes under besides its code and data: the device, the precision resolved
from `--precision auto`, whether 32-bit matrix products may use TF32, and which backend
augments the training images. The cell identity (`benchmark.runs.identity`) records the
resolved values, so a bf16 cell and a 32-true cell of the same config never share a run
folder; the runner (`benchmark.runs.runner`) applies them."""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import torch

from benchmark import compiled, shortcuts, tf32
from benchmark.config import ConfigError, RunConfig
from benchmark.registry import MethodError, get_method


@functools.lru_cache(maxsize=1)
def cuda_available() -> bool:
    # Asked once per process: on a machine without a driver every call retries it (~0.4 ms),
    # and a sweep's planner names thousands of cells.
    return torch.cuda.is_available()


def resolved_device(device: str) -> str:
    """`auto` -> cuda where this process sees a GPU, else cpu; any other value as given."""
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    return device


def resolved_precision(method: str, device: str, precision: str) -> str:
    """`--precision auto`: the method's `gpu_precision` on a GPU, 32-true on the CPU; any other
    value as given. `device` is resolved (`resolved_device`)."""
    if precision != "auto":
        return precision
    if not device.startswith("cuda"):
        return "32-true"
    try:
        return get_method(method).gpu_precision
    except MethodError:
        return "auto"  # a method not installed here: the cell cannot run, but a dry run still names it


def resolved_augment_backend(config: RunConfig, device: str) -> str:
    """Which code augments the training images (`augment_backend`): `pil` (torchvision on
    PIL images, per image, in the loading process; today's numbers) or `device` (one batched
    resample on the training device, `data.device_augment`). `auto`: `device` on a GPU when
    the run augments, else `pil`. Without augmentation nothing is augmented: `pil`, whatever
    was asked (the training images then pass the deterministic test transform)."""
    if not config.augment:
        return "pil"
    if config.augment_backend == "auto":
        return "device" if device.startswith("cuda") else "pil"
    return config.augment_backend


def numerics_identity(config: RunConfig) -> dict[str, object]:
    """The resolved values a cell's identity records in place of the config's `auto`s."""
    device = resolved_device(config.device)
    return {
        "precision": resolved_precision(config.method, device, config.precision),
        "augment_backend": resolved_augment_backend(config, device),
    }


def run_name_part(config: RunConfig) -> str:
    """What the run folder's name says of the numerics beyond the default fp32 path, e.g.
    `_bf16` or `_fp32tf32` (empty for fp32 without TF32: names as before)."""
    precision = numerics_identity(config)["precision"]
    short = {"bf16-mixed": "_bf16", "16-mixed": "_fp16", "32-true": "", "auto": ""}[precision]
    if config.tf32 and precision == "32-true":
        short = "_fp32tf32"
    elif config.tf32:
        short += "tf32"
    return short


@contextlib.contextmanager
def computing_as(config: RunConfig) -> Iterator[None]:
    """The run's computation switches on for the code inside: the exact shortcuts (or the
    plain path, `--no-shortcuts`), compiled blocks (`--compile-blocks`) and TF32 as asked
    (`--tf32`: the flags themselves are `apply_tf32`'s; the switch keys the caches). Context
    variables: a thread that runs a run's code (Flower's ServerApp) enters them itself."""
    with shortcuts.use(config.shortcuts), compiled.use(config.compile_blocks), tf32.use(config.tf32):
        yield


def apply_tf32(device: str, tf32: bool) -> None:
    """TF32 for 32-bit matrix products and convolutions on CUDA only when the run opts in
    (`--tf32`): PyTorch leaves it on for cuDNN convolutions by default, which would give a
    32-true run 10-bit mantissas in its patch embedding without saying so."""
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32


def check_numerics(config: RunConfig) -> None:
    """Refuse settings that cannot mean what they say, naming the fix."""
    if config.augment_backend == "device" and not config.augment:
        raise ConfigError(
            "augment_backend = 'device' augments the training images on the device, but augment is false "
            "(nothing is augmented). Set --augment true, or leave augment_backend at auto."
        )
