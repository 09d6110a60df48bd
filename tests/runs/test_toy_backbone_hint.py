"""The toy-backbone warning points to a preset that holds the run's dataset (issue 50, item 7:
it suggested `reproduce base2novel --datasets ...` for PACS, which base2novel does not have)."""

from __future__ import annotations

import pytest

from benchmark.cli.single_run import toy_backbone_on_real_data
from benchmark.config import build_config
from benchmark.sweeps.presets import load_preset


@pytest.mark.parametrize(
    "dataset, protocol, preset",
    [("pacs", "domains", "fedmvp_msst"), ("dtd", "base2novel", "base2novel"), ("cifar10", "dirichlet", "dirichlet")],
)
def test_the_suggested_preset_has_the_dataset(dataset, protocol, preset):
    warning = toy_backbone_on_real_data(build_config({"dataset": dataset, "protocol": protocol}))
    assert f"`fedbench reproduce {preset} --datasets {dataset}`" in warning
    assert "base2novel --datasets ...`" not in warning
    assert load_preset(preset).cells(datasets=[dataset])  # the suggested command has cells to run


def test_no_preset_is_suggested_for_a_dataset_none_holds():
    warning = toy_backbone_on_real_data(build_config({"dataset": "eurosat"}))
    assert "--backbone ViT-B-16-quickgelu --pretrained openai." in warning and "reproduce" not in warning
