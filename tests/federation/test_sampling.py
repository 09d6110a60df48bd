"""Client sampling (the authors' rule by default, the uniform rule by name) and the rule for
clients that never trained: they receive the final download and are flagged."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from conftest import tiny_config, write_split_zhou

from benchmark.config import ConfigError, RunConfig, build_config
from benchmark.federation.simulator import client_sampling_schedule, clients_per_round
from benchmark.runs.identity import cell_hash
from benchmark.runs.preparation import build_seeded_method
from benchmark.runs.runner import run_experiment
from benchmark.sweeps.presets import load_preset


def test_authors_rule_trains_everyone_in_round_one_then_int_of_the_fraction():
    schedule = client_sampling_schedule(30, 0.25, 6, seed=1, rule="authors")
    assert schedule[0] == list(range(30))
    assert all(len(r) == 7 == len(set(r)) for r in schedule[1:])  # int(7.5), where rounding gives 8
    uniform = client_sampling_schedule(30, 0.25, 6, seed=1, rule="uniform")
    assert all(len(r) == 8 == len(set(r)) for r in uniform)  # round 1 sampled like the others
    assert clients_per_round("authors", 100, 0.001) == 1  # at least one client


@pytest.mark.parametrize("rule", ["authors", "uniform"])
def test_full_participation_is_every_client_every_round_under_both_rules(rule):
    # The toy preset (participation 1.0): the demo's schedule does not depend on the rule.
    assert client_sampling_schedule(8, 1.0, 10, seed=1, rule=rule) == [list(range(8))] * 10


def test_dirichlet_preset_trains_every_client_in_round_one():
    cells = load_preset("dirichlet").cells({"out": "unused"}, [1, 2, 3], ["cifar10"], ["pfedmma"])
    for cell in cells:
        c = cell.config
        assert (c.clients, c.participation, c.client_sampling) == (100, 0.1, "authors")
        schedule = client_sampling_schedule(c.clients, c.participation, c.rounds, c.seed, c.client_sampling)
        assert schedule[0] == list(range(100))
        assert {len(r) for r in schedule[1:]} == {10}
        # Under the uniform rule some client is never sampled in 50 rounds for these seeds
        # (the schedule the suite used before; why the authors' rule is the default).
        old = client_sampling_schedule(c.clients, c.participation, c.rounds, c.seed, "uniform")
        assert set(range(100)) - {cid for r in old for cid in r}


def test_the_rule_is_in_the_config_and_its_hash():
    default = RunConfig()
    assert default.client_sampling == "authors"
    assert default.to_dict()["client_sampling"] == "authors"
    assert cell_hash(RunConfig(client_sampling="uniform")) != cell_hash(default)
    with pytest.raises(ConfigError, match="client_sampling = 'random' is invalid: expected authors or uniform"):
        build_config({"client_sampling": "random"})


def test_reproduce_dry_run_shows_the_rule(fedbench, tmp_path):
    done = fedbench("reproduce", "dirichlet", "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0
    assert "client sampling: authors (round 1: all 100 clients, then 10 of 100 per round)" in done.stdout
    done = fedbench("reproduce", "dirichlet", "--dry-run", "--out", str(tmp_path), "--set", "client_sampling=uniform")
    assert "client sampling: uniform (10 of 100 clients every round)" in done.stdout


@pytest.fixture(scope="module")
def data_for_four_clients(tmp_path_factory):
    # 16 classes -> 8 base classes, 2 per client for 4 clients.
    return write_split_zhou(tmp_path_factory.mktemp("sampling_data"), num_classes=16)


def one_client_trains(data_root, tmp_path, method: str):
    """One round in which one of four clients trains (uniform rule, 25 %)."""
    config = tiny_config(
        data_root, tmp_path, method=method, clients=4, rounds=1, participation=0.25, client_sampling="uniform"
    )
    with pytest.warns(UserWarning, match="3 of 4 clients never trained"):
        result = run_experiment(config, progress=False)
    (trained,) = result.federation.rounds[0].clients
    never = sorted(set(range(4)) - {trained})
    return config, result, trained, never


def check_flags(result, trained: int, never: list[int]) -> None:
    metrics = pd.read_csv(result.run_dir / "metrics.csv")
    flags = metrics[metrics.metric == "rounds_trained"].set_index("client")["value"].to_dict()
    assert flags == {trained: 1, **{cid: 0 for cid in never}}
    assert json.loads((result.run_dir / "summary.json").read_text())["clients_never_trained"] == never


def test_never_trained_pfedmoap_client_gets_the_global_prompt(data_for_four_clients, tmp_path):
    config, result, trained, never = one_client_trains(data_for_four_clients, tmp_path, "pfedmoap")
    states = result.federation.client_states
    initial = build_seeded_method(config, result_backbone(config)).client_state()
    # The one upload is the FedAvg prompt; the others receive it (no experts: none has a
    # previous prompt), and keep their initial gate. The trained client keeps its own state.
    for cid in never:
        assert torch.equal(states[cid]["ctx"], states[trained]["ctx"])
        assert int(states[cid]["expert_count"]) == 0
        assert torch.equal(states[cid]["gate.q.weight"], initial["gate.q.weight"])
    assert not torch.equal(states[trained]["ctx"], initial["ctx"])
    check_flags(result, trained, never)


def test_never_trained_client_of_a_personal_method_gets_the_final_download(data_for_four_clients, tmp_path):
    config, result, trained, never = one_client_trains(data_for_four_clients, tmp_path, "fedpgp")
    states = result.federation.client_states
    initial = build_seeded_method(config, result_backbone(config)).client_state()
    for cid in never:
        assert torch.equal(states[cid]["sigma"], states[trained]["sigma"])  # the aggregate
        assert torch.equal(states[cid]["U"], initial["U"])  # personal parts: initial
    assert not torch.equal(states[trained]["U"], initial["U"])
    check_flags(result, trained, never)


def test_nothing_is_flagged_when_every_client_trains(data_for_four_clients, tmp_path):
    config = tiny_config(data_for_four_clients, tmp_path, method="promptfl", clients=4, rounds=2, participation=0.25)
    result = run_experiment(config, progress=False)  # authors: round 1 trains all four
    assert sorted(result.federation.rounds_trained.values()) == [1, 1, 1, 2]
    assert result.federation.never_trained == []
    assert json.loads((result.run_dir / "summary.json").read_text())["clients_never_trained"] == []


def result_backbone(config):
    from benchmark.backbone import load_backbone

    return load_backbone(config.backbone, None)
