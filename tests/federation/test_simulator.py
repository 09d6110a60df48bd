"""Per-round evaluation: metrics.csv holds the protocol's metrics at every evaluated round."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from conftest import tiny_config

from benchmark.evaluation.client_metrics import evaluation_rounds
from benchmark.runs.runner import run_experiment


def test_evaluation_rounds_default_to_about_five_points_and_always_the_last():
    assert evaluation_rounds(50, 0) == {10, 20, 30, 40, 50}
    assert evaluation_rounds(3, 0) == {1, 2, 3}
    assert evaluation_rounds(10, 4) == {4, 8, 10}
    assert evaluation_rounds(2, 1) == {1, 2}


# LoRA has dropout: training after an evaluation must run in train mode again.
@pytest.mark.parametrize("method", ["promptfl", "pfedmoap", "zeroshot", "lora"])
def test_eval_every_1_gives_every_rounds_accuracy_and_the_last_equals_the_summary(method, fake_data_root, tmp_path):
    rounds = 3
    config = tiny_config(fake_data_root, tmp_path, method=method, rounds=rounds, eval_every=1, shots=2)
    result = run_experiment(config, progress=False)
    metrics = pd.read_csv(result.run_dir / "metrics.csv")
    over_clients = metrics[metrics.client == -1]
    for metric in ("Local", "Base", "Novel", "HM"):
        rows = over_clients[over_clients.metric == metric].sort_values("round")
        assert rows["round"].tolist() == [1, 2, 3], metric
        assert rows["value"].iloc[-1] == json.loads((result.run_dir / "summary.json").read_text())["metrics"][metric]
    per_client = metrics[(metrics.client >= 0) & (metrics.metric == "Local")]
    assert sorted(per_client.groupby("round").size().to_dict().items()) == [(r, config.clients) for r in (1, 2, 3)]

    # Evaluating every round changes no number: the same run evaluated once at the end.
    once = run_experiment(
        tiny_config(fake_data_root, tmp_path / "once", method=method, rounds=rounds, eval_every=rounds, shots=2),
        progress=False,
    )
    assert once.summary["metrics"] == result.summary["metrics"]
    for cid, state in once.federation.client_states.items():  # bit-identical models, not just equal accuracies
        for key, value in state.items():
            assert torch.equal(value, result.federation.client_states[cid][key]), (cid, key)
    assert once.run_dir.name == result.run_dir.name  # the same cell
