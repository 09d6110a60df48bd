"""The marks on RunConfig's fields (`benchmark.config.MARKS`): which options a cell's identity
hashes, which W&B records and which `fedbench runs` compares, read by each through `fields_where`."""

from __future__ import annotations

from dataclasses import fields

import pytest

from benchmark.config import MARKS, RunConfig, fields_where
from benchmark.runs.tracking import wandb_config
from benchmark.sweeps.compare import RunEntry


def test_an_option_marked_out_of_the_identity_changes_no_result_key():
    plain = RunConfig()
    for name in fields_where(identity=False):
        assert name not in plain.result_key()
    moved = RunConfig(out="elsewhere", device="cpu", data_root="/data", eval_batch_size=7, wandb="disabled")
    assert moved.result_key() == plain.result_key()
    assert RunConfig(rounds=3).result_key() != plain.result_key()  # an unmarked option is hashed


def test_paths_and_wandb_settings_are_not_logged_to_wandb(tmp_path):
    config = RunConfig(out=str(tmp_path / "private"), data_root=str(tmp_path / "data"), wandb_project="p")
    logged = wandb_config(config)
    assert set(fields_where(logged=False)) >= {"out", "data_root", "wandb", "wandb_project"}
    assert not set(fields_where(logged=False)) & set(logged)
    assert logged["rounds"] == config.rounds and logged["device"]  # the rest is there


def test_fedbench_runs_compares_settings_not_where_files_went(tmp_path):
    config = {"out": "a", "device": "cpu", "num_workers": 2, "rounds": 3, "method_args": {"lr": 0.1}}
    entry = RunEntry("a", tmp_path / "a", "finished", config, {})
    assert entry.settings() == {"rounds": 3, "lr": 0.1}
    assert {"out", "device", "num_workers"} <= set(fields_where(compared=False))


def test_every_mark_a_field_carries_is_a_known_one_and_an_unknown_one_is_refused():
    for f in fields(RunConfig):
        assert set(f.metadata) <= set(MARKS), f.name
    with pytest.raises(ValueError, match="no run option mark 'hashed'"):
        fields_where(hashed=False)
