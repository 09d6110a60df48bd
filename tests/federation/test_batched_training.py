"""Batched training: a round's clients trained in one vmapped pass end where the client loop
leaves them, one by one (benchmark/federation/batched_training.py)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import method_config, tiny_config, trained_built_in_methods

from benchmark.federation.batched_training import BatchedTraining, _sgd, probe, why_not
from benchmark.federation.client_loop import ClientLoop
from benchmark.federation.simulator import FederatedSimulator
from benchmark.registry import builtin_methods, register_method
from benchmark.runs.identity import run_name
from benchmark.runs.preparation import prepare_run
from benchmark.runs.runner import run_experiment
from data.partition import ClientShard
from methods.promptfl import PromptFL

TOGETHER = sorted(n for n, c in builtin_methods().items() if c.batched_training)
RTOL = 1e-5


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a.float(), b.float(), rtol=RTOL, atol=RTOL * b.abs().max().item())


def test_which_built_in_methods_train_together_and_why_the_others_do_not(fake_data_root, tmp_path):
    assert TOGETHER == ["clip_adapter", "fedclip", "fedmaple", "fedtpg", "fedvpt", "pfedmma", "promptfl"]
    for name in trained_built_in_methods():
        method = prepare_run(method_config(name, fake_data_root, tmp_path), progress=False, train_features=False).method
        reason = why_not(method)
        assert (reason is None) == (name in TOGETHER), (name, reason)


def runs_both_ways(config):
    """(batched, one by one) results of `config`, and the warnings the batched run gave: its
    fallbacks to one by one, and any other (none expected)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        together = run_experiment(dataclasses.replace(config, batched_training=True), write=False, progress=False)
    alone = run_experiment(dataclasses.replace(config, batched_training=False), write=False, progress=False)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "lr_scheduler.step()" in m]  # the optimizers StackedSGD stands in for
    return together, alone, [m for m in messages if "train one by one" in m]


@pytest.mark.parametrize("name", TOGETHER)
def test_whole_runs_trained_together_and_one_by_one_agree(name, fake_data_root, tmp_path):
    """4 clients of 8, 8, 4 and 4 images: in batches of 3, three or two steps an epoch, the
    last one short (a pass of its own), and the small clients sit out the third."""
    config = method_config(name, fake_data_root, tmp_path, clients=4, batch_size=3, local_epochs=2, rounds=2)
    together, alone, fallback = runs_both_ways(config)
    assert not fallback
    assert together.timing["flops"]["train_steps"] < alone.timing["flops"]["train_steps"]  # it did batch
    assert together.per_client == alone.per_client  # the same predictions
    for a, b in zip(together.federation.rounds, alone.federation.rounds):
        assert a.lr == b.lr
        for cid, loss in b.train_loss.items():
            assert abs(a.train_loss[cid] - loss) <= RTOL * abs(loss), (cid, a.train_loss[cid], loss)
    for cid, state in alone.federation.client_states.items():
        trained = together.federation.client_states[cid]
        assert all(close(trained[k], v) for k, v in state.items()), cid
    assert [c.num_samples for c in prepare_run(config, progress=False).partition.clients] == [8, 8, 4, 4]


@register_method("test_dropout_prompt")
class DropoutPrompt(PromptFL):
    """PromptFL with dropout on its image features, declared batchable: vmap refuses the
    random draw, so the probe must send it back to the client loop."""

    batched_training = True

    def classify(self, image_features, class_features):
        return super().classify(F.dropout(image_features, 0.5, self.training), class_features)


def test_a_method_the_probe_refuses_trains_one_by_one_with_a_warning(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="test_dropout_prompt", rounds=2)
    together, alone, fallback = runs_both_ways(config)
    assert len(fallback) == 1 and "randomness" in fallback[0]
    assert together.per_client == alone.per_client  # bit for bit: both trained one by one
    for cid, state in alone.federation.client_states.items():
        assert all(torch.equal(together.federation.client_states[cid][k], v) for k, v in state.items())


def test_a_method_that_does_not_declare_it_trains_one_by_one_with_a_warning(fake_data_root, tmp_path):
    config = method_config("lora", fake_data_root, tmp_path, rounds=1)
    together, alone, fallback = runs_both_ways(config)
    assert len(fallback) == 1 and "does not declare batched_training" in fallback[0]
    assert together.per_client == alone.per_client


@pytest.mark.parametrize(
    "settings",
    [
        dict(momentum=0.9, weight_decay=5e-4),
        dict(momentum=0.9, dampening=0.1, weight_decay=1e-2, nesterov=False),
        dict(momentum=0.8, weight_decay=0.0, nesterov=True),
        dict(momentum=0.0, weight_decay=1e-3),
    ],
)
def test_stacked_sgd_steps_each_row_as_torch_sgd_and_leaves_the_others(settings):
    """Rows 0..3 of a stacked parameter, each its own client at its own lr; row 2 sits out
    the later steps (its epoch is over): its parameter and momentum stay as they were."""
    generator = torch.Generator().manual_seed(0)
    start = torch.randn(4, 5, 3, generator=generator)
    lrs = [0.1, 0.05, 0.2, 0.1]
    grads = [torch.randn(4, 5, 3, generator=generator) for _ in range(4)]
    stepping = [[0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 3], [0, 1, 3]]
    group = {"momentum": 0.0, "dampening": 0.0, "weight_decay": 0.0, "nesterov": False, **settings}
    stacked, momentum = start.clone().requires_grad_(), {}
    for grad, rows in zip(grads, stepping):
        if rows == [0, 1, 3]:
            frozen = (stacked.detach()[2].clone(), momentum["p"][2].clone() if "p" in momentum else None)
        stacked.grad = grad
        _sgd(stacked, momentum, "p", torch.tensor(rows), [lrs[r] for r in rows], group)
        if rows == [0, 1, 3]:
            assert torch.equal(stacked.detach()[2], frozen[0])
            assert frozen[1] is None or torch.equal(momentum["p"][2], frozen[1])
    for row in range(4):
        p = start[row].clone().requires_grad_()
        sgd = torch.optim.SGD([p], lr=lrs[row], **settings)
        for grad, rows in zip(grads, stepping):
            if row in rows:
                p.grad = grad[row].clone()
                sgd.step()
        assert torch.allclose(stacked.detach()[row], p.detach(), rtol=1e-6, atol=1e-7), row


@pytest.mark.parametrize("name", TOGETHER)
def test_the_probe_passes_for_the_declared_methods_and_restores_the_state(name, fake_data_root, tmp_path):
    """One batched step's losses and gradients equal the client loop's (a run's first check),
    on clients whose states differ; the module is left in the state it had."""
    run = prepare_run(method_config(name, fake_data_root, tmp_path, clients=4), progress=False)
    simulator, method = run.simulator(), run.method
    starts, clients = [], []
    for cid in (0, 1):
        generator = torch.Generator().manual_seed(cid)
        starts.append(
            {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in method.client_state().items()}
        )
        clients.append((cid, *simulator.client_data(cid, 0)))
    before = method.client_state()
    assert probe(BatchedTraining(method, ClientLoop("cpu", "32-true")), starts, clients) is None
    assert all(torch.equal(before[k], v) for k, v in method.client_state().items())


def test_batched_training_is_part_of_a_cells_identity(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="pfedmma", method_args={"first_block": 2})
    assert run_name(config) != run_name(dataclasses.replace(config, batched_training=True))


def test_flower_refuses_batched_training(fedbench, tmp_path):
    """A Flower node holds one client: there is nothing to train together."""
    done = fedbench(
        "flower", "--method", "promptfl", "--batched-training", "true", "--out", tmp_path, "--wandb", "disabled"
    )
    assert done.returncode == 2 and "a Flower node holds one client" in done.stderr
    assert not list(tmp_path.iterdir())


def test_clients_with_class_lists_of_different_lengths_train_in_separate_passes(fake_data_root, tmp_path, monkeypatch):
    """Clients 0 and 2 hold classes 0-2, client 1 classes 3-4: two passes a step (stacked
    class inputs need one length), each client ending where it ends one by one."""
    run = prepare_run(method_config("promptfl", fake_data_root, tmp_path, clients=3), progress=False)
    labels = run.dataset.train.labels
    pool = sorted(i for shard in run.partition.clients for i in shard.train_indices)
    by_class = {c: [i for i in pool if labels[i] == c] for c in range(5)}
    shards = [
        ClientShard(0, tuple(i for c in (0, 1, 2) for i in by_class[c][:2]), (0, 1, 2)),
        ClientShard(1, tuple(i for c in (3, 4) for i in by_class[c]), (3, 4)),
        ClientShard(2, tuple(i for c in (0, 1, 2) for i in by_class[c][2:]), (0, 1, 2)),
    ]
    passes = []
    train = BatchedTraining._train

    def recorded(self, starts, clients, epochs):
        passes.append([cid for cid, _, _ in clients])
        return train(self, starts, clients, epochs)

    monkeypatch.setattr(BatchedTraining, "_train", recorded)
    initial, finals = run.method.client_state(), {}
    for batched in (True, False):
        run.method.load_client_state(initial)
        settings = dataclasses.replace(run.settings, batched_training=batched, batch_size=3)
        simulator = FederatedSimulator(
            run.method,
            run.train_inputs,
            labels,
            run.dataset.class_names,
            shards,
            [[0, 1, 2]] * 2,
            1,
            settings,
            progress=False,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback to one by one
            finals[batched] = simulator.run().client_states
    assert passes == [[0, 2], [1]] * 2  # two rounds of two passes
    for cid, state in finals[False].items():
        assert all(close(finals[True][cid][k], v) for k, v in state.items()), cid


def test_a_diverging_client_stops_a_batched_run_as_it_stops_one_by_one(fake_data_root, tmp_path):
    """A NaN loss in a batched round is reported as the client loop reports it: the same
    round, client, step and lr."""
    from benchmark.errors import DivergenceError

    config = method_config("pfedmma", fake_data_root, tmp_path, method_args={"first_block": 2, "lr": 1e9})
    messages = []
    for batched in (True, False):
        with pytest.raises(
            DivergenceError, match=r"method 'pfedmma' diverged at round \d, client \d, step \d+ with lr 1e\+09"
        ) as raised:
            run_experiment(dataclasses.replace(config, batched_training=batched), write=False, progress=False)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
