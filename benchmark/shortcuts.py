"""Exact compute shortcuts, and the one switch that turns them all off.

Work whose result cannot change a number is skipped or done once:
- the text tower runs only up to the batch's longest prompt: CLIP's text transformer is
  causal, so the positions after a prompt's end-of-text token (where its feature is read)
  cannot reach it (`Backbone.encode_text`);
- the text tower's frozen prefix -- the blocks before the first wrapped one, run on fixed
  tokens (pFedMMA's "a photo of a {}." through its unadapted blocks) -- is computed once
  per token batch and reused (`Backbone.encode_text`);
- in evaluation, the image tower's frozen prefix (`FederatedMethod.frozen_image_blocks`)
  is computed once per test image and shared by every client (`benchmark.evaluation.accuracy`);
- pFedMoAP's downloaded experts, frozen for a client-round, are encoded once per class
  list instead of at every step.

Each is the same computation as the plain path up to float rounding (a truncated or split
sequence of matrix products sums in another order: relative differences ~1e-7 in fp32,
`tests/core/test_shortcuts.py`). Not bit-identical, so the switch is a run setting that is part
of a cell's identity (`RunConfig.shortcuts`, `fedbench run --no-shortcuts`). The runner
sets it for the duration of a run; code that runs a method outside the runner (another
federation engine) should do the same with `use(config.shortcuts)`.
"""

from __future__ import annotations

from benchmark.switches import RunSwitch

_SWITCH = RunSwitch("fedbench_shortcuts", default=True)
active = _SWITCH.active  # whether the exact shortcuts are on here (on unless a run turned them off)
use = _SWITCH.use  # `with use(enabled):` shortcuts on, or off (the plain path), for the code inside
