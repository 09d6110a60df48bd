"""No host synchronisation inside a training or evaluation step, for every Table 1 method.

On CUDA a step that reads a device value on the host (`.item()`, `int(t)`, `.cpu()`,
`.tolist()`, `bool(t)`, `torch.equal`, `.nonzero()`) waits for every kernel queued before it:
the GPU idles while Python catches up. The CPU cannot see that wait, so these tests count
the calls that would make it: every such read of a tensor inside a step fails the test.
What a run reads once (the logit scale, a prompt's length) is read before the counted
steps, in the first client-round; the counted steps are every step of the second round
and of the evaluations. Host values that never were on the device are not syncs: the
optimizers' step counters (torch.optim keeps them on the host, also on CUDA) are not
counted.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter

import pytest
import torch
from conftest import method_config

from benchmark import flops, host_values
from benchmark.evaluation import accuracy as accuracy_module
from benchmark.federation import client_loop
from benchmark.runs.runner import run_experiment

TABLE1 = ["promptfl", "fedotp", "fedpgp", "pfedmoap", "clip_adapter", "lora", "pfedmma"]

# Tensor reads that copy a device value to the host (each a sync on CUDA).
TENSOR_READS = ("item", "tolist", "cpu", "numpy", "__int__", "__float__", "__bool__", "__index__", "nonzero")
FUNCTION_READS = ("equal",)  # torch.equal answers a Python bool


class SyncCounter:
    """Counts host reads of tensors while `counting` is entered (per call site)."""

    def __init__(self) -> None:
        self.depth = 0
        self.sites: Counter[str] = Counter()

    def wrap(self, original):
        counter = self

        def read(*args, **kwargs):
            if counter.depth > 0 and not _from_torch_optim():
                frame = sys._getframe(1)
                counter.sites[f"{original.__name__} at {frame.f_code.co_filename}:{frame.f_lineno}"] += 1
            counter.depth -= 1  # what the read itself calls is not another read
            try:
                return original(*args, **kwargs)
            finally:
                counter.depth += 1

        return read

    @contextlib.contextmanager
    def counting(self):
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1


def _from_torch_optim() -> bool:
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__", "").startswith("torch.optim")


@pytest.fixture
def counter(monkeypatch):
    counter = SyncCounter()
    counter.depth = -(10**6)  # off until a step is entered (see `steps`)
    # The code's CUDA form where it has one (FedOTP's stopping): host reads wait there.
    monkeypatch.setattr(host_values, "reads_wait", lambda device: True)
    for name in TENSOR_READS:
        monkeypatch.setattr(torch.Tensor, name, counter.wrap(getattr(torch.Tensor, name)))
    for name in FUNCTION_READS:
        monkeypatch.setattr(torch, name, counter.wrap(getattr(torch, name)))
    return counter


def counted_steps(monkeypatch, counter: SyncCounter, from_round: int) -> list[int]:
    """Count every training step from client-round `from_round` on (0-based, across the
    run) and every evaluation batch. Returns [steps counted] (filled in as they run)."""
    steps = [0]
    rounds = [0]
    fit = client_loop.ClientLoop._fit
    step, manual_step = client_loop.ClientLoop._step, client_loop.ClientLoop._training_step
    score = accuracy_module.score_batch
    ledger_step = flops.TrainSteps.step

    def counted_fit(self, *args, **kwargs):
        try:
            return fit(self, *args, **kwargs)
        finally:
            rounds[0] += 1

    @contextlib.contextmanager
    def one_step(counted: bool):
        if not counted:
            yield
            return
        steps[0] += 1
        counter.depth += 10**6 + 1
        try:
            yield
        finally:
            counter.depth -= 10**6 + 1

    def counted_step(self, module, *args):
        with one_step(rounds[0] >= from_round and counter.depth < 0):
            return step(self, module, *args)

    def counted_manual(self, module, *args):
        with one_step(rounds[0] >= from_round and counter.depth < 0):
            return manual_step(self, module, *args)

    def counted_score(*args, **kwargs):
        with one_step(counter.depth < 0):
            return score(*args, **kwargs)

    @contextlib.contextmanager
    def counted_ledger_step(self, module, batch, first):  # the FLOP ledger's part of a step
        with one_step(rounds[0] >= from_round and counter.depth < 0), ledger_step(self, module, batch, first):
            yield

    monkeypatch.setattr(flops.TrainSteps, "step", counted_ledger_step)
    monkeypatch.setattr(client_loop.ClientLoop, "_fit", counted_fit)
    monkeypatch.setattr(client_loop.ClientLoop, "_step", counted_step)
    monkeypatch.setattr(client_loop.ClientLoop, "_training_step", counted_manual)
    monkeypatch.setattr(accuracy_module, "score_batch", counted_score)
    return steps


@pytest.mark.parametrize("augment", [False, True], ids=["cached-features", "augmented"])
@pytest.mark.parametrize("method", TABLE1)
def test_no_host_sync_in_a_training_or_evaluation_step(method, augment, counter, monkeypatch, fake_data_root, tmp_path):
    # 3 clients, 2 rounds: the second round's client-rounds (3 on) run after every
    # once-per-run read was made.
    config = method_config(method, fake_data_root, tmp_path, augment=augment, rounds=2, eval_every=1)
    steps = counted_steps(monkeypatch, counter, from_round=3)
    run_experiment(config, write=False, progress=False)
    assert steps[0] >= 4, f"{method}: only {steps[0]} steps were counted"
    assert not counter.sites, f"{method}: host syncs in {steps[0]} steps: {dict(counter.sites)}"


def test_the_counter_sees_a_read_in_a_step(counter):
    # The hook is not blind: a read inside a counted region is seen, one outside is not.
    value = torch.ones(3).sum()
    value.item()
    counter.depth += 10**6 + 1
    value.item()
    int(value)
    counter.depth -= 10**6 + 1
    assert sum(counter.sites.values()) == 2
