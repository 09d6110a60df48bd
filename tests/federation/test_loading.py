"""One loader over the whole schedule (`benchmark/federation/loading.py`): the same batches as a
loader per client-round, its workers started once per run instead of once per local epoch."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_config
from torch.utils.data import DataLoader

from benchmark import shortcuts
from benchmark.federation.loading import ScheduleStream
from benchmark.runs.preparation import prepare_run


def train(config, schedule_loader: bool, monkeypatch):
    """The run's federation with or without the one loader; and how many loader iterators
    (each one forks its workers) it made."""
    iterators = []
    original = DataLoader.__iter__
    monkeypatch.setattr(DataLoader, "__iter__", lambda self: iterators.append(1) or original(self))
    with shortcuts.use(config.shortcuts):
        run = prepare_run(config, progress=False)
        run.settings = dataclasses.replace(run.settings, schedule_loader=schedule_loader)
        result = run.simulator().run()
    monkeypatch.setattr(DataLoader, "__iter__", original)
    return result, len(iterators)


def test_the_schedules_one_loader_gives_every_client_round_its_own_batches(tmp_path, fake_data_root, monkeypatch):
    # PIL augmentation in 2 workers: 3 clients x 1 round x 2 epochs.
    config = tiny_config(
        fake_data_root, tmp_path, method="promptfl", augment=True, num_workers=2, rounds=1, local_epochs=2
    )
    streamed, streamed_iterators = train(config, True, monkeypatch)
    per_round, per_round_iterators = train(config, False, monkeypatch)
    assert streamed_iterators == 1  # workers forked once for the run
    assert per_round_iterators == 3 * 2  # once per client-round and epoch
    for cid, state in per_round.client_states.items():  # the same batches: bit-identical models
        for key, value in state.items():
            assert torch.equal(value, streamed.client_states[cid][key]), (cid, key)
    assert [r.train_loss for r in streamed.rounds] == [r.train_loss for r in per_round.rounds]


class Items:
    """A client-round's items: (epoch, position) -> (a tensor naming it, a label)."""

    def __init__(self, round_index: int, cid: int) -> None:
        self.round_index, self.cid = round_index, cid

    def __getitem__(self, key):
        epoch, position = key
        return torch.tensor([self.round_index, self.cid, epoch, position]), position % 2


def make_set(round_index: int, cid: int) -> Items:
    return Items(round_index, cid)


def test_batches_left_untaken_are_dropped_and_taking_out_of_order_is_an_error():
    plan = [(0, 0, [[2, 0, 1], [1, 2, 0]]), (0, 1, [[1, 0], [0, 1]])]
    stream = ScheduleStream(make_set, plan, {(0, 0): 2, (0, 1): 2}, num_workers=0, pin_memory=False)
    first = stream.batches(0, 0)
    assert len(first) == 2
    epoch0 = list(first)
    assert [b[0][:, 3].tolist() for b in epoch0] == [[2, 0], [1]]
    next(iter(first))  # epoch 1: its first batch taken, then the method skipped the rest (-1)
    (only,) = list(stream.batches(0, 1))  # the next client-round's first epoch
    assert only[0][:, 1].tolist() == [1, 1] and only[0][:, 3].tolist() == [1, 0]
    with pytest.raises(RuntimeError, match="batches taken out of order"):
        stream.take((0, 0, 1, 1))  # already passed
