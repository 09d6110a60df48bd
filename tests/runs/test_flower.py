"""Federations on Flower (`benchmark.runs.flower`): a method runs unchanged as a Flower app on
Flower's simulation runtime (a real local Ray instance, no network beyond localhost) and
gives the numbers `fedbench run` gives with the same config; a node keeps its state and
sends only the method's upload_keys."""

from __future__ import annotations

import re
import sys

import pandas as pd
import pytest
import torch
from conftest import toy_run_config

from benchmark.config import ConfigError

# A small toy federation both engines run: 4 clients, 2 rounds, seed 3.
TOY_FLAGS = [
    "--dataset",
    "toy",
    "--pretrained",
    "fedbench-toy-test",
    "--clients",
    "4",
    "--shots",
    "4",
    "--rounds",
    "2",
    "--local-epochs",
    "1",
    "--batch-size",
    "8",
    "--seed",
    "3",
    "--wandb",
    "disabled",
]


def toy_config(tmp_path, method: str, **method_args):
    return toy_run_config(tmp_path, method, method_args)


# pFedMMA at 100x its paper lr: on 2 short rounds its personal adapters then move enough
# that clients score differently on the shared Base classes (personal state matters).
PFEDMMA = {"first_block": 2, "lr": 0.1}


def test_states_cross_flower_bit_for_bit():
    from benchmark.runs.flower import from_record, to_record

    state = {
        "w": torch.randn(3, 4),
        "double": torch.randn(5, dtype=torch.float64),
        "count": torch.tensor([3]),
        "bf16": torch.randn(2, 2).to(torch.bfloat16),
        "strided": torch.randn(4, 4)[:, 1],
    }
    back = from_record(to_record(state))
    assert set(back) == set(state)
    for key, value in state.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key


def test_a_node_sends_only_the_upload_keys_and_keeps_its_own_state(toy_test_checkpoint, tmp_path):
    from flwr.app import Context, RecordDict

    from benchmark.runs import flower

    config = toy_config(tmp_path, "pfedmma", **PFEDMMA)
    context = Context(
        run_id=1, node_id=7, node_config={"partition-id": 2, "num-partitions": 4}, state=RecordDict(), run_config={}
    )
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
    assert torch.equal(
        flower.from_record(context.state[flower.STATE])["text_down.2.weight"], kept["text_down.2.weight"]
    )


def test_node_config_holds_only_node_options():
    from benchmark.runs.flower import config_from_run_config, node_config_overrides

    given = {"partition-id": 0, "num-partitions": 4, "data-root": "/data", "device": "cuda:1"}
    assert node_config_overrides(given) == {"data_root": "/data", "device": "cuda:1"}
    with pytest.raises(ConfigError, match="node config 'seed' is not a node option"):
        node_config_overrides({"seed": 2})
    with pytest.raises(ConfigError, match="names no fedbench YAML"):
        config_from_run_config({"config": ""})


def test_without_flwr_the_command_names_the_extra(fedbench, monkeypatch, tmp_path):
    for name in [n for n in sys.modules if n == "benchmark.runs.flower" or n.startswith("flwr.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setitem(sys.modules, "flwr", None)  # as if flwr were not installed
    done = fedbench("flower", "--method", "promptfl", "--wandb", "disabled", "--out", tmp_path / "runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "need the flwr package" in done.stderr and "pip install -c constraints.txt -e '.[flower]'" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_flower_simulation_equals_fedbench_run(fedbench, toy_test_checkpoint, tmp_path):
    """PromptFL (one global prompt) and pFedMMA (personal adapters stay on the nodes), 2
    rounds, 4 clients: `fedbench flower` (Flower's run_simulation; pFedMMA with 2 ClientApps
    at once) writes the run folder `fedbench run` writes with the same flags: summary.json,
    and metrics.csv with every client's Local/Base/Novel, losses and round-1 scores, equal
    to the last digit."""
    import json

    toy = TOY_FLAGS
    # pFedMMA at lr 3: two rounds of 4 shots must move its personal adapters far enough to change
    # predictions on the classes every client shares (at 0.1-0.3 the 8-head test CLIP's do not)
    for method, args, parallel in (("promptfl", [], "1"), ("pfedmma", ["--first-block", "2", "--lr", "3"], "2")):
        folders = {}
        for engine, extra in (("run", []), ("flower", ["--parallel", parallel])):
            done = fedbench(engine, "--method", method, *args, *toy, "--out", tmp_path / engine, *extra)
            assert done.returncode == 0, done.stderr
            (folders[engine],) = (tmp_path / engine).glob(f"{method}_toy_*")
        summaries = {e: json.loads((f / "summary.json").read_text()) for e, f in folders.items()}
        assert summaries["flower"] == summaries["run"], method  # metrics, bytes, never-trained clients, counts
        metrics = {e: (f / "metrics.csv").read_text() for e, f in folders.items()}
        assert metrics["flower"] == metrics["run"], method
    # pFedMMA's clients differ over the same class sets (Base, Novel): their personal state counts
    per_client = pd.read_csv(folders["run"] / "metrics.csv").query(
        "metric in ['Base', 'Novel'] and client >= 0 and round == 2"
    )
    assert per_client.groupby("metric")["value"].nunique().max() > 1


@pytest.mark.slow
@pytest.mark.parametrize("federation", ["local", "central"])
def test_flower_runs_local_and_central_equal_to_fedbench_run(federation, fedbench, toy_test_checkpoint, tmp_path):
    """The rows around a federation on Flower (`--federation local | central`): every node
    trains its own client and sends nothing (local), or one node holds the union of the
    clients' data and scores its one state on every client's test data (central); the run
    folders equal `fedbench run`'s to the last digit. pFedMMA at lr 3: its clients' states
    differ, so a client scored with another's state would show."""
    import json

    flags = ["--method", "pfedmma", "--first-block", "2", "--lr", "3", *TOY_FLAGS, "--federation", federation]
    folders = {}
    for engine, extra in (("run", []), ("flower", ["--parallel", "2"])):
        done = fedbench(engine, *flags, "--out", tmp_path / engine, *extra)
        assert done.returncode == 0, done.stderr
        (folders[engine],) = (tmp_path / engine).glob(f"pfedmma_{federation}_toy_*")
    summaries = {e: json.loads((f / "summary.json").read_text()) for e, f in folders.items()}
    assert summaries["flower"] == summaries["run"]
    assert summaries["run"]["bytes_up_total"] == summaries["run"]["bytes_down_total"] == 0  # nothing sent
    assert (folders["flower"] / "metrics.csv").read_text() == (folders["run"] / "metrics.csv").read_text()
    metrics = pd.read_csv(folders["run"] / "metrics.csv")
    trained = metrics[metrics.metric == "rounds_trained"].set_index("client")["value"].to_dict()
    assert trained == {0: 2, 1: 2, 2: 2, 3: 2}  # central: its one client trained for every client


def test_flower_refuses_what_runs_in_process_only(fake_data_root, tmp_path):
    """Fine-tuning and evaluating a saved run need the clients' states, which stay on Flower's
    nodes; the federation kinds all run there."""
    from conftest import method_config

    from benchmark.runs.flower import FlowerEngine
    from benchmark.runs.runner import run_experiment

    engine = FlowerEngine(lambda *args: pytest.fail("refused before it runs"))
    for overrides in ({"finetune_epochs": 1}, {"evaluate_from": str(tmp_path)}):
        config = method_config("promptfl", fake_data_root, tmp_path, **overrides)
        with pytest.raises(ConfigError, match="run in process only"):
            run_experiment(config, progress=False, engine=engine)
    for federation in ("fedavg", "local", "central"):
        engine.check(method_config("promptfl", fake_data_root, tmp_path, federation=federation))


@pytest.mark.slow
def test_a_diverging_node_stops_the_flower_run_and_writes_nothing(fedbench, toy_test_checkpoint, tmp_path):
    """The node's DivergenceError reaches the command as `fedbench run` reports it (exit 1)."""
    flags = ["--first-block", "2", "--lr", "1e9", *TOY_FLAGS, "--rounds", "1"]  # the last --rounds wins
    done = fedbench("flower", "--method", "pfedmma", *flags, "--out", tmp_path / "runs")
    assert done.returncode == 1
    assert re.search(
        r"fedbench flower: error: method 'pfedmma' diverged at round 1, client \d, step \d+ with lr "
        r"1e\+09: the training loss is nan\. The run is stopped and no run folder is written",
        done.stderr,
    )
    assert not [p for p in (tmp_path / "runs").glob("pfedmma_*") if p.is_dir()]


def test_a_method_that_trains_nothing_is_refused_before_flower_starts(fedbench, toy_test_checkpoint, tmp_path):
    done = fedbench("flower", "--method", "zeroshot", *TOY_FLAGS, "--out", tmp_path / "runs")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'zeroshot' trains nothing" in done.stderr and "fedbench run" in done.stderr


@pytest.mark.slow
def test_flower_under_partial_participation_equals_fedbench_run(fedbench, toy_test_checkpoint, tmp_path):
    """Half the clients a round (uniform sampling, seed 3: rounds [0, 1] and [0, 2]): client 1
    is absent from the last round and client 3 never trains. pFedMoAP scores a client as its
    own training left it (evaluate_after_download = False), so on Flower the absent client is
    scored on its node with no download and the never-trained one with the final download, as
    the simulator does: the run folders are equal to the last digit."""
    import json

    flags = [
        "--method",
        "pfedmoap",
        "--gate-heads",
        "4",
        *TOY_FLAGS,
        "--participation",
        "0.5",
        "--client-sampling",
        "uniform",
    ]
    folders = {}
    for engine, extra in (("run", []), ("flower", ["--parallel", "2"])):
        done = fedbench(engine, *flags, "--out", tmp_path / engine, *extra)
        assert done.returncode == 0, done.stderr
        (folders[engine],) = (tmp_path / engine).glob("pfedmoap_toy_*")
    metrics = pd.read_csv(folders["run"] / "metrics.csv")
    trained = metrics[metrics.metric == "rounds_trained"].set_index("client")["value"].to_dict()
    assert trained == {0: 2, 1: 1, 2: 1, 3: 0}  # the participation this test is about
    summaries = {e: json.loads((f / "summary.json").read_text()) for e, f in folders.items()}
    assert summaries["flower"] == summaries["run"]
    assert (folders["flower"] / "metrics.csv").read_text() == (folders["run"] / "metrics.csv").read_text()


def nodes_holding(monkeypatch, partition_ids: list[int]) -> None:
    """Flower's simulation runtime registers one node per client with partition-id 0..N-1;
    here its nodes hold `partition_ids` instead, as SuperNodes started with those
    `--node-config "partition-id=K"` would."""
    from flwr.server.superlink.fleet.vce import vce_api

    real = getattr(vce_api._register_nodes, "__wrapped__", vce_api._register_nodes)

    def register(num_nodes, state_factory):
        nodes = real(len(partition_ids), state_factory)
        return dict(zip(nodes, partition_ids))

    register.__wrapped__ = real
    monkeypatch.setattr(vce_api, "_register_nodes", register)


@pytest.mark.slow
def test_the_server_names_partition_ids_held_twice_or_by_no_node(fedbench, toy_test_checkpoint, tmp_path, monkeypatch):
    """docs/scaling-out.md: the ServerApp waits for one node per client and stops with an error
    naming the missing or duplicated partition-ids (exit 2, before any round)."""
    from benchmark.runs import flower

    nodes_holding(monkeypatch, [0, 1, 1, 3])
    done = fedbench("flower", "--method", "promptfl", *TOY_FLAGS, "--out", tmp_path / "twice")
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "partition-ids held twice [1], missing [2] (4 nodes connected)" in message
    assert 'give every SuperNode its own client, --node-config "partition-id=K num-partitions=4"' in message
    assert not [p for p in (tmp_path / "twice").glob("promptfl_*") if p.is_dir()]  # no run folder

    monkeypatch.setattr(flower, "NODES_TIMEOUT_S", 3)  # not 10 minutes
    nodes_holding(monkeypatch, [0, 1, 3])  # the SuperNode of client 2 never started
    done = fedbench("flower", "--method", "promptfl", *TOY_FLAGS, "--out", tmp_path / "missing")
    assert done.returncode == 2, done.stderr
    assert "partition-ids held twice [], missing [2] (3 nodes connected within 3 s)" in " ".join(done.stderr.split())


def test_flower_prints_its_rounds_and_results_once_and_nothing_else(toy_test_checkpoint, tmp_path):
    """Issue 38: 2 rounds printed 91 lines (Flower's log twice, its DEBUG lines, its deprecation
    of run_simulation twice, Ray's FutureWarning, every Ray worker's "Manually terminating").
    As a user runs it, output to a file: the round lines, the table and the run folder."""
    import os
    import subprocess

    log = tmp_path / "flower.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "benchmark.cli", "flower", "--method", "promptfl", *TOY_FLAGS, "--out", tmp_path],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            timeout=600,
        )
    lines = log.read_text().splitlines()
    assert done.returncode == 0, lines
    assert len(lines) <= 15, lines
    assert len(set(lines)) == len(lines), lines
    assert not [line for line in lines if re.search(r"DEBUG|WARNING|Warning|DEPRECATED", line)], lines
    # the run header (what runs, on which backbone and weights), then the round bar
    assert lines[0].startswith("fedbench flower: promptfl on toy") and "weights fedbench-toy-test" in lines[0]
    assert lines[1].startswith("training promptfl: 0/2 rounds")
    assert [line for line in lines if line.startswith("training promptfl: 2/2 rounds (100%)")]
    assert lines[-1].startswith("run folder: ")
