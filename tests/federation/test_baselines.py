"""The rows around a federation (`federation: local | central`, benchmark/federation/servers/):
local uploads nothing and equals each client trained alone (a one-client federation of it);
central equals one client holding the union of the clients' data, for as many steps as
the federation takes, and its one state is scored for every client."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import method_config

from benchmark.federation.client_batches import StreamBatches
from benchmark.federation.loading import steps_per_epoch
from benchmark.federation.servers.central import CentralServer, central_schedule, union_client
from benchmark.federation.servers.fedavg import FedAvgServer
from benchmark.federation.simulator import FederatedSimulator
from benchmark.runs.preparation import prepare_run
from benchmark.runs.runner import run_experiment


def simulator_of(run, clients, schedule, server=FedAvgServer, epoch_steps=None) -> FederatedSimulator:
    return FederatedSimulator(
        run.method,
        run.train_inputs,
        run.dataset.train.labels,
        run.dataset.class_names,
        clients,
        schedule,
        run.config.seed,
        run.settings,
        progress=False,
        server=server,
        epoch_steps=epoch_steps,
    )


def assert_same_state(a, b) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def count_steps(method) -> list[int]:
    """Counts `method.training_step` calls in a one-element list (an instance attribute wraps it)."""
    calls = [0]
    original = method.training_step

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    method.training_step = counted
    return calls


@pytest.mark.parametrize("name", ["promptfl", "pfedmma"])
def test_local_uploads_nothing_and_equals_each_client_trained_alone(name, fake_data_root, tmp_path):
    config = method_config(name, fake_data_root, tmp_path, federation="local", clients=3, rounds=2)
    run = prepare_run(config, progress=False)
    method = run.method
    initial = method.client_state()
    aggregated = []
    original_aggregate = method.aggregate
    method.aggregate = lambda updates: aggregated.append(updates) or original_aggregate(updates)
    local = run.simulator().run()
    assert aggregated == []  # the server never aggregated
    assert all(r.bytes_up == 0 and r.bytes_down == 0 for r in local.rounds)
    assert local.rounds_trained == {c.client_id: 2 for c in run.partition.clients}
    for shard in run.partition.clients:
        # A federation of this client alone (the method's own server: the aggregate of one
        # upload is that upload, downloaded back), in the rounds and with the seeds it had.
        method.load_client_state(initial)
        alone = simulator_of(run, [shard], [[shard.client_id] for _ in run.schedule]).run()
        assert_same_state(local.client_states[shard.client_id], alone.client_states[shard.client_id])
    # ... and the federation differs from it: the clients did share something there
    method.load_client_state(initial)
    config_fedavg = method_config(name, fake_data_root, tmp_path, clients=3, rounds=2)
    fedavg = prepare_run(config_fedavg, progress=False).simulator().run()
    assert any(not torch.equal(fedavg.client_states[0][k], local.client_states[0][k]) for k in local.client_states[0])


def test_central_equals_one_client_on_the_union(fake_data_root, tmp_path):
    # 2 clients of 3 base classes x 4 shots = 12 images, batch 4: the clients' steps per
    # epoch (3 + 3) are one pass over the union (24 / 4), so its batches are a one-client
    # federation's on the union, batch for batch.
    config = method_config("promptfl", fake_data_root, tmp_path, federation="central", clients=2, batch_size=4)
    run = prepare_run(config, progress=False)
    clients = run.partition.clients
    assert [c.num_samples for c in clients] == [12, 12]
    initial = run.method.client_state()
    central = run.simulator().run()
    assert list(central.client_states) == [0] and all(r.bytes_up == 0 for r in central.rounds)
    union = union_client(clients)
    assert sorted(union.train_indices) == sorted(i for c in clients for i in c.train_indices)
    run.method.load_client_state(initial)
    alone = simulator_of(run, [union], [[0] for _ in run.schedule]).run()
    assert_same_state(central.client_states[0], alone.client_states[0])
    # scored: the one state for every client
    scored = CentralServer.scored_states(central.client_states, clients)
    assert list(scored) == [c.client_id for c in clients]
    assert all(s is central.client_states[0] for s in scored.values())


def test_central_takes_as_many_steps_as_the_federation(fake_data_root, tmp_path):
    # Batch 5: a client's 12 images take 3 steps (5, 5, 2), the union's 24 would take 5.
    config = method_config("promptfl", fake_data_root, tmp_path, clients=2, batch_size=5, rounds=2)
    run = prepare_run(config, progress=False)
    schedule, budgets = central_schedule(run.schedule, run.partition.clients, 5)
    assert schedule == [[0], [0]] and budgets == [6, 6] and steps_per_epoch(24, 5) == 5
    calls = count_steps(run.method)
    run.simulator().run()
    federation_steps = calls[0]
    central_run = prepare_run(
        method_config("promptfl", fake_data_root, tmp_path, clients=2, batch_size=5, rounds=2, federation="central"),
        progress=False,
    )
    calls = count_steps(central_run.method)
    central_run.simulator().run()
    assert calls[0] == federation_steps == 2 * 6


def test_stream_batches_go_on_across_passes():
    class Items:
        def __len__(self):
            return 3

        def batch(self, keys):
            return list(keys)

    stream = StreamBatches(Items(), 2, seed=7, steps=2)
    first, second = list(stream), list(stream)  # two local epochs of one client-round
    keys = [k for batch in first + second for k in batch]
    assert len(stream) == 2 and all(len(b) == 2 for b in first + second)
    assert sorted(p for e, p in keys if e == 0) == [0, 1, 2]  # pass 0 whole, then pass 1 ...
    assert [e for e, _ in keys] == [0, 0, 0, 1, 1, 1, 2, 2]


def test_a_central_run_scores_every_client_and_saves_one_state(fake_data_root, tmp_path):
    config = method_config("promptfl", fake_data_root, tmp_path, federation="central", clients=2, rounds=1)
    result = run_experiment(config, progress=False)
    assert sorted(result.per_client) == [0, 1]
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["bytes_up_total"] == 0 and summary["uploaded_params"] == 0
    assert "_central_" in result.run_dir.name
    saved = torch.load(result.run_dir / "clients.pt", weights_only=True)
    assert_same_state(saved[0], saved[1])


def test_an_unknown_federation_is_refused_naming_the_choices(fedbench, fake_data_root, tmp_path):
    from conftest import tiny_run_args

    done = fedbench(*tiny_run_args(fake_data_root, tmp_path, "--federation", "fedprox"))
    assert done.returncode == 2
    assert "federation = 'fedprox' is invalid: expected fedavg | local | central" in done.stderr


def test_a_method_that_trains_nothing_runs_as_central(fake_data_root, tmp_path):
    """Its one state (the initial one) is scored for every client; no round is counted (the
    central run of zeroshot stopped with a KeyError before the kinds were servers)."""
    config = method_config("zeroshot", fake_data_root, tmp_path, federation="central", clients=2, rounds=1)
    result = run_experiment(config, progress=False)
    assert sorted(result.per_client) == [0, 1] and result.federation.rounds_trained == {}


def test_the_central_learning_rate_is_the_federation_step_cut_in_its_sequential_pieces(fake_data_root, tmp_path):
    """2 clients x 12 images at batch 4: a client takes 3 steps a round, the central client 6,
    so the central row trains at half the tuned lr; local and fedavg rows at the tuned lr."""
    from benchmark.federation.servers.central import central_lr_factor
    from data.partition import ClientShard

    lrs = {}
    for federation in ("fedavg", "local", "central"):
        config = method_config(
            "promptfl",
            fake_data_root,
            tmp_path,
            federation=federation,
            clients=2,
            batch_size=4,
            method_args={"lr": 0.01},
        )
        run = prepare_run(config, progress=False)
        lrs[federation] = run.method.hparams.lr
    assert lrs == {"fedavg": 0.01, "local": 0.01, "central": pytest.approx(0.005)}
    # partial participation and unequal clients: the mean client-round's steps over the mean central round's
    a, b = ClientShard(0, tuple(range(8)), (0,)), ClientShard(1, tuple(range(8, 12)), (1,))
    assert central_lr_factor([[0, 1], [0]], [a, b], 4) == pytest.approx(((2 + 1 + 2) / 3) / ((3 + 2) / 2))
    assert central_lr_factor([[0], [0]], [a], 4) == 1.0  # one client holding everything: nothing to cut
