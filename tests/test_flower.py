"""Federations on Flower (`benchmark.flower`): a method runs unchanged as a Flower app on
Flower's simulation runtime (a real local Ray instance, no network beyond localhost) and
gives the numbers `fedbench run` gives with the same config; a node keeps its state and
sends only the method's upload_keys."""

from __future__ import annotations

import sys

import pytest
import torch

from benchmark.config import ConfigError, build_config


def toy_config(tmp_path, method: str, **method_args):
    return build_config(
        dict(method=method, dataset="toy", backbone="fedbench-toy-vit", pretrained="fedbench-toy-test",
             clients=4, shots=4, rounds=2, local_epochs=1, batch_size=8, seed=3, wandb="disabled",
             checkpoint_every=0, out=str(tmp_path / "runs")),
        {"method_args": method_args},
    )


# pFedMMA at 100x its paper lr: on 2 short rounds its personal adapters then move enough
# that clients score differently on the shared Base classes (personal state matters).
PFEDMMA = {"first_block": 2, "lr": 0.1}


def test_states_cross_flower_bit_for_bit():
    from benchmark.flower import from_record, to_record

    state = {
        "w": torch.randn(3, 4), "double": torch.randn(5, dtype=torch.float64), "count": torch.tensor([3]),
        "bf16": torch.randn(2, 2).to(torch.bfloat16), "strided": torch.randn(4, 4)[:, 1],
    }
    back = from_record(to_record(state))
    assert set(back) == set(state)
    for key, value in state.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key


def test_a_node_sends_only_the_upload_keys_and_keeps_its_own_state(toy_test_checkpoint, tmp_path):
    from flwr.app import Context, RecordDict

    from benchmark import flower

    config = toy_config(tmp_path, "pfedmma", **PFEDMMA)
    context = Context(run_id=1, node_id=7, node_config={"partition-id": 2, "num-partitions": 4},
                      state=RecordDict(), run_config={})
    round_1 = RecordDict({"fedbench": flower.config_record(config, 1)})  # what the server sends
    reply = flower.client_train(round_1, context)
    world = flower._WORLD[next(iter(flower._WORLD))]
    kept = flower.from_record(context.state[flower.STATE])
    upload = flower.from_record(reply["upload"])
    assert set(kept) == set(world.run.method.state_dict())
    assert sorted(upload) == sorted(k for k in kept if k.startswith("shared."))  # pFedMMA's upload_keys
    assert all(torch.equal(upload[k], kept[k]) for k in upload)
    moved = [k for k in kept if not torch.equal(kept[k], world.initial[k])]
    assert any(k.startswith(("text_down", "vision_up")) for k in moved)  # personal adapters trained, kept here
    assert int(reply["metrics"]["client-id"]) == 2
    scored = flower.client_evaluate(round_1, context)
    assert not scored.array_records  # evaluation sends back numbers only
    assert set(scored["metrics"]) == {"client-id", "Local", "Base", "Novel"}
    assert torch.equal(flower.from_record(context.state[flower.STATE])["text_down.2.weight"], kept["text_down.2.weight"])


def test_node_config_holds_only_node_options():
    from benchmark.flower import config_from_run_config, node_config_overrides

    given = {"partition-id": 0, "num-partitions": 4, "data-root": "/data", "device": "cuda:1"}
    assert node_config_overrides(given) == {"data_root": "/data", "device": "cuda:1"}
    with pytest.raises(ConfigError, match="node config 'seed' is not a node option"):
        node_config_overrides({"seed": 2})
    with pytest.raises(ConfigError, match="names no fedbench YAML"):
        config_from_run_config({"config": ""})


def test_without_flwr_the_command_names_the_extra(fedbench, monkeypatch, tmp_path):
    for name in [n for n in sys.modules if n == "benchmark.flower" or n.startswith("flwr.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setitem(sys.modules, "flwr", None)  # as if flwr were not installed
    done = fedbench("flower", "--method", "promptfl", "--wandb", "disabled", "--out", tmp_path / "runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "need the flwr package" in done.stderr and "pip install -c constraints.txt -e '.[flower]'" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_flower_simulation_equals_fedbench_run(toy_test_checkpoint, tmp_path):
    """PromptFL (one global prompt) and pFedMMA (personal adapters stay on the nodes), 2
    rounds, 4 clients, through Flower's run_simulation (pFedMMA with 2 ClientApps at once):
    the summary, every per-client metric and metrics.csv (losses, round-1 scores) equal
    `fedbench run`'s to the last digit."""
    from benchmark.flower import simulate
    from benchmark.runner import run_experiment

    for method, args, parallel in (("promptfl", {}, 1), ("pfedmma", PFEDMMA, 2)):
        plain = run_experiment(toy_config(tmp_path / "plain", method, **args), progress=False)
        flower = run_experiment(toy_config(tmp_path / "flower", method, **args), progress=False,
                                engine=simulate(parallel=parallel))
        assert flower.summary["metrics"] == plain.summary["metrics"], method
        assert flower.summary == plain.summary, method  # bytes up/down, never-trained clients, counts
        assert flower.per_client == plain.per_client, method
        assert (flower.run_dir / "metrics.csv").read_text() == (plain.run_dir / "metrics.csv").read_text(), method
    assert len({m["Base"] for m in plain.per_client.values()}) > 1  # pFedMMA's clients differ: personal state


@pytest.mark.slow
def test_a_diverging_node_stops_the_flower_run_and_writes_nothing(toy_test_checkpoint, tmp_path):
    from benchmark.errors import DivergenceError
    from benchmark.flower import simulate
    from benchmark.runner import run_experiment

    config = toy_config(tmp_path, "pfedmma", first_block=2, lr=1e6)
    with pytest.raises(DivergenceError, match=r"^method 'pfedmma' diverged at round \d, client \d, step \d+ with lr 1e\+06: .* no run folder"):
        run_experiment(config, progress=False, engine=simulate())
    assert not (tmp_path / "runs").exists() or not [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]


def test_a_method_that_trains_nothing_is_refused_before_flower_starts(fedbench, toy_test_checkpoint, tmp_path):
    done = fedbench("flower", "--method", "zeroshot", "--dataset", "toy", "--pretrained", "fedbench-toy-test",
                    "--clients", "4", "--wandb", "disabled", "--out", tmp_path / "runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'zeroshot' trains nothing" in done.stderr and "fedbench run" in done.stderr
