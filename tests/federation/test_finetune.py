"""`--finetune-epochs K`: after the last round each client trains the state it is scored with
for K local epochs on its own data; the federation's rounds are the run's without it."""

from __future__ import annotations

import json

import pandas as pd
import torch
from conftest import method_config

from benchmark.runs.preparation import prepare_run
from benchmark.runs.runner import run_experiment


def test_finetuning_moves_only_the_scored_states(fake_data_root, tmp_path):
    run = prepare_run(method_config("promptfl", fake_data_root, tmp_path, rounds=1), progress=False)
    federation = run.simulator().run()
    before = {cid: {k: v.clone() for k, v in s.items()} for cid, s in federation.client_states.items()}
    tuned, losses = run.finetuner().finetune(federation.client_states, 1)
    assert sorted(tuned) == sorted(losses) == sorted(before)
    for cid, state in federation.client_states.items():  # the federation's states are left as they were
        assert all(torch.equal(state[k], before[cid][k]) for k in state)
    assert all(any(not torch.equal(tuned[c][k], before[c][k]) for k in before[c]) for c in before)


def test_a_finetuned_run_keeps_the_federations_last_round(fake_data_root, tmp_path):
    plain = run_experiment(method_config("pfedmma", fake_data_root, tmp_path / "a"), progress=False)
    tuned = run_experiment(method_config("pfedmma", fake_data_root, tmp_path / "b", finetune_epochs=2), progress=False)
    assert plain.run_dir.name != tuned.run_dir.name and "_ft2_" in tuned.run_dir.name  # in the identity
    rows = {r.run_dir: pd.read_csv(r.run_dir / "metrics.csv") for r in (plain, tuned)}
    trained = [
        rows[r.run_dir].query("metric in ['train_loss', 'lr', 'bytes_up', 'bytes_down']") for r in (plain, tuned)
    ]
    pd.testing.assert_frame_equal(trained[0].reset_index(drop=True), trained[1].reset_index(drop=True))
    finetune = rows[tuned.run_dir].query("metric == 'finetune_loss'")
    assert sorted(finetune["client"]) == sorted(plain.per_client)
    summaries = [json.loads((r.run_dir / "summary.json").read_text()) for r in (plain, tuned)]
    assert summaries[0]["bytes_up_per_round"] == summaries[1]["bytes_up_per_round"]
    saved = [torch.load(r.run_dir / "clients.pt", weights_only=True) for r in (plain, tuned)]
    assert any(not torch.equal(saved[0][0][k], saved[1][0][k]) for k in saved[0][0])  # the scored state moved
