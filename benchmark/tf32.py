"""Whether a run lets 32-bit matrix products use TF32 (`--tf32`), readable deep in the run.

`benchmark.runs.numerics.apply_tf32` sets PyTorch's global flags on CUDA (the CPU has no TF32);
this switch says what the run asked for on any device, so the keys of the caches of frozen
activations (`benchmark.backbone.computing_key`) keep a `--tf32` cell's entries apart from
another cell's everywhere, also where the flags are the same (the CPU)."""

from __future__ import annotations

from benchmark.switches import RunSwitch

_SWITCH = RunSwitch("fedbench_tf32", default=False)
active = _SWITCH.active  # whether the run here asked for TF32 (off unless a run turned it on)
use = _SWITCH.use  # `with use(enabled):` for the code inside
