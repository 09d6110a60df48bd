"""The authors' rules as run options: `optimizer_state = shared` is one SGD stepped over the
clients in sequence (as the official pFedMMA code does), bit for bit against a hand-written
loop; `select_round = best_local_test` reports the round with the best mean Local and the
table marks it."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_run_config

from benchmark.config import ConfigError
from benchmark.federation import simulator as federation
from benchmark.federation.client_loop import ClientRoundTraining
from benchmark.runs import runner

# pFedMMA at 10x its paper lr on the toy CLIP: two short rounds move its adapters (tests/runs/test_flower.py)
ARGS = {"first_block": 2, "lr": 0.1}


def toy_config(tmp_path, **options):
    options = {"clients": 3, "rounds": 3, "local_epochs": 2, "batch_size": 4, **options}
    return toy_run_config(tmp_path, "pfedmma", ARGS, **options)


def final_states(config) -> dict[int, dict[str, torch.Tensor]]:
    return runner.run_experiment(config, write=False, progress=False).federation.client_states


def test_a_shared_optimizer_is_one_sgd_stepped_over_the_clients_in_sequence(tmp_path, monkeypatch):
    shared = final_states(toy_config(tmp_path, optimizer_state="shared"))

    # The hand-written reference: one torch.optim.SGD built once, stepped for every batch of
    # every client of every round, in the simulator's order; everything else is the simulator's.
    optimizer: list[torch.optim.SGD] = []

    def one_sgd_for_all(self, cid: int, round_index: int, epochs: int | None = None) -> ClientRoundTraining:
        batches, client = self.client_data(cid, round_index)
        method = self.method
        if not optimizer:
            hp = method.hparams
            optimizer.append(
                torch.optim.SGD(method.parameters(), lr=hp.lr, momentum=hp.momentum, weight_decay=hp.weight_decay)
            )
        method.set_client(client)
        method.train()
        losses = []
        for epoch in range(self.settings.local_epochs):
            batches.sampler.set_epoch(epoch)
            for index, batch in enumerate(batches):
                loss = method.training_step(batch, index)  # on the CPU: where the batches are
                optimizer[0].zero_grad()
                loss.backward()
                optimizer[0].step()
                losses.append(float(loss.detach()))
        method.set_client(None)
        return ClientRoundTraining(sum(losses) / len(losses), 0.0, 0.0, 0.0, None)

    monkeypatch.setattr(federation.FederatedSimulator, "_train_client", one_sgd_for_all)
    reference = final_states(toy_config(tmp_path / "reference"))
    monkeypatch.undo()
    fresh = final_states(toy_config(tmp_path / "fresh"))

    assert shared.keys() == reference.keys()
    for cid in shared:
        for key in shared[cid]:
            assert torch.equal(shared[cid][key], reference[cid][key]), (cid, key)
    # and the rule matters: a fresh optimizer per client-round trains other adapters
    assert any(not torch.equal(shared[c][k], fresh[c][k]) for c in shared for k in shared[c])


def test_best_local_test_reports_the_round_with_the_best_mean_local(tmp_path):
    config = toy_config(tmp_path, select_round="best_local_test", rounds=4)
    result = runner.run_experiment(config, progress=False)
    metrics = (result.run_dir / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    rows = [dict(zip(header, line.split(","))) for line in metrics[1:]]
    local = {
        int(r["round"]): float(r["value"]) for r in rows if r["metric"] == "Local" and r["client"] in ("-1", "all")
    }
    assert sorted(local) == [1, 2, 3, 4]  # every round evaluated
    best = max(local, key=lambda r: (local[r], -r))  # ties: the earlier round
    assert result.summary["round"] == best and result.summary["select_round"] == "best_local_test"
    assert result.summary["metrics"]["Local"] == pytest.approx(local[best])
    final = runner.run_experiment(toy_config(tmp_path / "final", rounds=4), write=False, progress=False).summary
    assert final["round"] == 4 and "select_round" not in final


def test_the_authors_rules_are_refused_where_they_cannot_hold(tmp_path):
    with pytest.raises(ConfigError, match="optimizer_state"):
        toy_config(tmp_path, optimizer_state="global")
    with pytest.raises(ConfigError, match="select_round"):
        toy_config(tmp_path, select_round="best")
    with pytest.raises(ConfigError, match="cannot be combined with --finetune-epochs"):
        runner.run_experiment(
            toy_config(tmp_path, select_round="best_local_test", finetune_epochs=1), write=False, progress=False
        )


def test_the_rules_are_part_of_a_cells_identity(tmp_path):
    from benchmark.runs.identity import run_name

    names = {
        run_name(toy_config(tmp_path, **options))
        for options in ({}, {"optimizer_state": "shared"}, {"select_round": "best_local_test"})
    }
    assert len(names) == 3
