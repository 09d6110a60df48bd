"""Per-client spread (benchmark/evaluation/spread.py): the std across clients and the worst
client of every metric that differs by client, in summary.json and `fedbench runs --spread`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_tiny_cell

from benchmark.evaluation.spread import client_spread
from benchmark.sweeps.compare import RunEntry, table


def test_spread_and_worst_client_of_a_constructed_case():
    per_client = {
        0: {"Local": 80.0, "Base": 70.0, "Novel": 60.0},
        1: {"Local": 60.0, "Base": 70.0, "Novel": 60.0},
        2: {"Local": 40.0, "Base": 70.0, "Novel": 60.0},
        3: {"Local": 40.0, "Base": 70.0, "Novel": 64.0},
    }
    spread = client_spread(per_client)
    # Local: mean 55, deviations 25, 5, -15, -15 -> population variance (625 + 25 + 225 + 225) / 4 = 275
    assert spread["Local"] == {"std": pytest.approx(275**0.5, abs=1e-4), "worst_client": 2, "worst": 40.0}
    assert spread["Novel"]["worst_client"] == 0 and spread["Novel"]["std"] == pytest.approx(3**0.5, abs=1e-4)
    assert "Base" not in spread  # the same for every client: no spread
    assert client_spread({0: {"Local": 50.0}}) == {}  # one client


def test_the_listing_shows_std_and_worst_client(tmp_path):
    spread = {"Local": {"std": 16.58, "worst_client": 2, "worst": 40.0}}
    entries = [
        RunEntry("a", tmp_path / "a", "finished", {"method": "promptfl"}, {"Local": 55.0}, "", spread),
        RunEntry("b", tmp_path / "b", "finished", {"method": "lora"}, {"Local": 50.0}),
    ]
    frame = table(entries, spread=True)
    assert list(frame["Local std"]) == [16.58, "–"] and list(frame["Local worst"]) == ["40.00 (c2)", "–"]
    assert "Local std" not in table(entries).columns


def test_a_run_records_its_spread(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "promptfl", fake_data_root, tmp_path / "runs")
    per_client = {}
    metrics = pd.read_csv(next((tmp_path / "runs").rglob("metrics.csv")))
    final = metrics[(metrics["round"] == summary["round"]) & (metrics["client"] >= 0)]
    for row in final.itertuples():
        if row.metric in summary["metrics"]:
            per_client.setdefault(row.client, {})[row.metric] = row.value
    assert summary.get("spread", {}) == json.loads(json.dumps(client_spread(per_client)))
    done = fedbench("runs", tmp_path / "runs", "--spread")
    assert done.returncode == 0
    assert all(f"{m} std" in done.stdout for m in summary.get("spread", {}))


def test_equal_values_of_personal_models_have_a_spread_of_0():
    """Issue 50, item 10: pFedMMA's clients keep personal parts, but when their Base came out
    equal the spread read '–', as for a method whose clients share one model."""
    import torch

    from benchmark.evaluation.spread import states_differ

    per_client = {0: {"Local": 80.0, "Base": 70.0}, 1: {"Local": 60.0, "Base": 70.0}}
    assert "Base" not in client_spread(per_client)
    assert client_spread(per_client, personal=True)["Base"] == {"std": 0.0, "worst_client": 0, "worst": 70.0}
    shared = {"ctx": torch.ones(2)}
    assert not states_differ({0: shared, 1: dict(shared)})
    assert states_differ({0: shared, 1: {"ctx": torch.tensor([1.0, 2.0])}})


def test_a_personal_method_records_the_spread_of_base_and_novel(fedbench, fake_data_root, tmp_path):
    # pFedMMA at its paper lr over 2 rounds: adapters barely move, yet they are each client's own.
    summary = run_tiny_cell(fedbench, "pfedmma", fake_data_root, tmp_path / "runs")
    assert {"Local", "Base", "Novel"} <= set(summary["spread"])
