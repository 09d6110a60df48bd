"""The FedTPG harness's learning-rate schedule: a per-client cosine over rounds.

The authors (FedTPG's and FedMVP's `federated/utils.py`, `client.py`) give every client
its own CosineAnnealingLR(T_max = rounds, eta_min = 0) and step it once after each round
the client trains in, so the p-th round a client trains in (p = 0, 1, ...) runs at
lr * (1 + cos(pi * p / R)) / 2. The expected values here are that formula, and torch's own
scheduler stepped as the authors step it, never the code under test.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from benchmark.federation.simulator import FederatedSimulator, FederationSettings
from benchmark.optim import PER_CLIENT_COSINE, per_client_cosine_lr
from benchmark.registry import available_methods, get_method

HARNESS_METHODS = ("fedtpg", "fedcocoop", "fedvpt", "fedmaple", "fedclip", "fedmvp")
TOY = ("--dataset", "toy", "--backbone", "fedbench-toy-vit", "--pretrained", "fedbench-toy-test")


def authors_formula(base: float, participations: int, rounds: int) -> float:
    return base * (1 + math.cos(math.pi * participations / rounds)) / 2


@pytest.mark.parametrize("rounds", [1, 3, 10, 100])
def test_the_lr_of_each_participation_is_the_authors_scheduler_stepped_once_per_round(rounds):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=0.003, momentum=0.9, weight_decay=1e-5)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, float(rounds))  # the authors' call
    for p in range(rounds):
        authors = optimizer.param_groups[0]["lr"]
        assert per_client_cosine_lr(0.003, p, rounds) == pytest.approx(authors, rel=1e-9, abs=1e-15)
        assert per_client_cosine_lr(0.003, p, rounds) == pytest.approx(authors_formula(0.003, p, rounds), rel=1e-12)
        optimizer.step()
        scheduler.step()  # client.train -> update_lr: once per participation


def test_known_points_of_the_schedule():
    assert per_client_cosine_lr(0.003, 0, 100) == 0.003  # a client's first round: the base lr
    assert per_client_cosine_lr(0.003, 50, 100) == pytest.approx(0.0015)  # halfway
    assert per_client_cosine_lr(0.003, 99, 100) == pytest.approx(0.003 * (1 - math.cos(math.pi / 100)) / 2)
    assert per_client_cosine_lr(0.003, 99, 100) < 1e-6
    assert per_client_cosine_lr(0.02, 5, 0) == 0.02  # a federation of unknown length: no decay


def test_negative_positions_are_refused():
    with pytest.raises(ValueError, match="participations and rounds must be >= 0"):
        per_client_cosine_lr(0.003, -1, 10)


def test_the_simulator_counts_each_clients_earlier_rounds_from_the_schedule():
    # Partial participation: a client's position lags the round counter (the authors' too).
    schedule = [[0, 1, 2], [0, 2], [1, 2], [0]]
    simulator = FederatedSimulator(None, torch.zeros(0), [], [], [], schedule, 1, FederationSettings(), progress=False)
    got = {(r, c): simulator.participations(c, r) for r, sampled in enumerate(schedule) for c in sampled}
    assert got == {(0, 0): 0, (0, 1): 0, (0, 2): 0, (1, 0): 1, (1, 2): 1, (2, 1): 1, (2, 2): 2, (3, 0): 2}
    assert simulator.participations(1, 3) == 2  # a round the client is not in: its rounds before it


@pytest.mark.parametrize("name", HARNESS_METHODS)
def test_the_fedtpg_harness_methods_state_the_per_client_cosine(name):
    assert get_method(name).lr_schedule == PER_CLIENT_COSINE


def test_every_built_in_method_states_its_schedule_and_describe_prints_it(fedbench):
    # the suite's own methods (other tests register throwaway plugins in this process)
    built_in = [name for name in available_methods() if get_method(name).__module__.startswith("methods.")]
    assert len(built_in) == 14
    for name in built_in:
        assert get_method(name).lr_schedule.strip(), f"{name} states no lr_schedule"
    done = fedbench("methods", "--describe", "fedmvp", "--backbone", "fedbench-tiny-vit")
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("learning-rate schedule: ")]
    assert "cos(pi * p / R)" in line and "rounds this client trained in before" in line
    done = fedbench("methods", "--describe", "fedpgp", "--backbone", "fedbench-tiny-vit")
    assert "learning-rate schedule: SGD at a constant lr" in done.stdout


@pytest.mark.parametrize("method", ["fedtpg", "fedmvp"])
def test_a_toy_run_writes_the_lr_of_each_client_round_falling_over_rounds(
    fedbench, toy_test_checkpoint, tmp_path, method
):
    out = tmp_path / "runs"
    done = fedbench(
        "run",
        "--method",
        method,
        *TOY,
        "--rounds",
        "3",
        "--clients",
        "4",
        "--shots",
        "2",
        "--local-epochs",
        "1",
        "--batch-size",
        "8",
        "--wandb",
        "disabled",
        "--out",
        out,
    )
    assert done.returncode == 0, done.stderr
    (run_dir,) = out.glob(f"{method}_toy_*")
    metrics = pd.read_csv(run_dir / "metrics.csv")
    lr = metrics[metrics.metric == "lr"].pivot(index="client", columns="round", values="value")
    assert list(lr.index) == [0, 1, 2, 3] and list(lr.columns) == [1, 2, 3]
    for client, rates in lr.iterrows():
        assert rates[1] > rates[2] > rates[3], (client, rates)
        # every client trains every round: its r-th round is its (r - 1)-th participation
        expected = [authors_formula(0.003, r - 1, 3) for r in (1, 2, 3)]
        assert list(rates) == pytest.approx(expected, rel=1e-9), client
