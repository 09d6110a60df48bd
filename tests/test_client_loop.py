"""The client loop's setup shortcut (no entry-point scan per Trainer) changes nothing."""

from __future__ import annotations

import contextlib
import dataclasses

import lightning as L

from benchmark import federation
from conftest import tiny_config


def callback_types(trainer) -> list[str]:
    return [type(c).__name__ for c in trainer.callbacks]


def test_a_trainer_gets_the_same_callbacks_without_the_scan():
    settings = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    plain = L.Trainer(**settings)
    with federation._no_entry_point_scan():
        light = L.Trainer(**settings)
    assert callback_types(light) == callback_types(plain)


def test_a_run_gives_the_same_numbers_with_and_without_the_scan(fake_data_root, tmp_path, monkeypatch):
    from benchmark.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=2, local_epochs=2)
    light = run_experiment(config, write=False, progress=False)
    monkeypatch.setattr(federation, "_no_entry_point_scan", contextlib.nullcontext)
    plain = run_experiment(dataclasses.replace(config), write=False, progress=False)
    assert light.summary["metrics"] == plain.summary["metrics"]
    assert light.per_client == plain.per_client
    assert [r.train_loss for r in light.federation.rounds] == [r.train_loss for r in plain.federation.rounds]
