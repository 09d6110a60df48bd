"""The CLIP towers' residual blocks compiled with `torch.compile` (`--compile-blocks`), and
the one switch that turns it on.

On a GPU a step of a prompt method is launch-bound: the frozen towers run dozens of small
kernels per block (layer norms, the attention's projections, the MLP's activation), each a
launch. A compiled block fuses them. Shapes are static within a run (a dataset's label space
and two batch sizes), so each block compiles once per shape. The frozen blocks are the same
modules for every method and client; a method's block wrappers call the compiled block
through the wrapper as before, so what a method adds stays eager.

A compiled block computes the same function as the eager one up to float rounding (fused
kernels sum in another order: relative differences ~1e-7 in fp32, `tests/core/test_compiled.py`),
so the switch is a run setting in the cell identity, off by default (the shipped tables are
eager). It is refused with the batched (vmapped) passes, which compile nothing.

CUDA graphs are opt-in and unmeasured: a compiled block runs in `torch.compile`'s default
mode unless `FEDBENCH_COMPILE_MODE` names another (`reduce-overhead`: the static-shape steps
replay as CUDA graphs, one launch per block instead of one per fused kernel). Not yet run on
a GPU here; it is an environment variable rather than a run option until it is, and it is
part of the cache keys of frozen activations (`backbone.computing_key`), not of the cell
identity: an experiment, never a shipped number.
"""

from __future__ import annotations

import os
import weakref

import torch
from torch import nn

from benchmark.errors import ConfigError
from benchmark.switches import RunSwitch

_SWITCH = RunSwitch("fedbench_compiled_blocks", default=False)
active = _SWITCH.active  # whether the towers' blocks run compiled here (off unless a run turned it on)
use = _SWITCH.use  # `with use(enabled):` compiled blocks on or off for the code inside
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")  # torch.compile's
BACKEND = "inductor"  # torch.compile's backend (the tests' fast checks use "eager": same tracing, no codegen)
# One compiled wrapper per block module for the process: a sweep's runs share the cached
# backbone, so they share its compiled blocks (and their compiled graphs).
_COMPILED: "weakref.WeakKeyDictionary[nn.Module, dict[str, nn.Module]]" = weakref.WeakKeyDictionary()


def mode() -> str:
    """torch.compile's mode for the blocks: `FEDBENCH_COMPILE_MODE`, default `default`."""
    chosen = os.environ.get("FEDBENCH_COMPILE_MODE", "default")
    if chosen not in MODES:
        raise ConfigError(
            f"FEDBENCH_COMPILE_MODE = {chosen!r} is invalid: expected {' | '.join(MODES)} (unset it for the default)"
        )
    return chosen


def block(module: nn.Module) -> nn.Module:
    """`module` as it runs here: compiled where the switch is on, else itself."""
    if not active():
        return module
    chosen = mode()
    compiled = _COMPILED.get(module, {}).get(chosen)
    if compiled is None:
        options = {} if chosen == "default" else {"mode": chosen}
        compiled = torch.compile(module, backend=BACKEND, **options)
        _COMPILED.setdefault(module, {})[chosen] = compiled
    return compiled
