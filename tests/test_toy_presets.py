"""`fedbench demo` runs every registered method on the toy preset: each must build on the
toy CLIP (4 blocks per tower) with the arguments the toy presets give it."""

from __future__ import annotations

import pytest

from benchmark.backbone import load_backbone
from benchmark.presets import load_preset
from benchmark.registry import available_methods, build_method


@pytest.mark.parametrize("preset", ["toy", "toy_fedmvp"])
def test_every_method_of_the_toy_tables_builds_on_the_toy_clip(preset):
    backbone = load_backbone("fedbench-toy-vit", None)  # random weights: only the architecture matters
    demo = [m for m in available_methods() if not m.startswith("test_")]
    cells = load_preset(preset).cells(methods=demo if preset == "toy" else None)
    assert {c.config.method for c in cells} >= ({"fedtpg", "fedcocoop", "fedvpt", "fedmaple", "fedclip"})
    for cell in cells:
        build_method(cell.config.method, backbone, cell.config.method_args)
