"""The round loop as an object with its own state (`benchmark.federation.round_loop`): its
`state_dict()` after a round, saved and loaded into a fresh loop, goes on to the numbers of a
loop never stopped; its keys are the round checkpoint's format 1; what is not one of its
states is refused, naming what is wrong."""

from __future__ import annotations

import io
from dataclasses import fields

import pytest
import torch
from conftest import tiny_config

from benchmark.federation.round_loop import RoundHooks, RoundLog, RoundLoop
from benchmark.federation.servers.fedavg import FedAvgServer
from benchmark.runs.preparation import prepare_run

# pFedMoAP downloads other clients' uploads (the bank); partial participation makes the
# sampling position matter: everything the loop's state holds is exercised.
SETTINGS = dict(method="pfedmoap", rounds=3, participation=0.67, client_sampling="uniform", local_epochs=1)


def saved_and_loaded(state: dict) -> dict:
    """`state` through `torch.save` and `torch.load`, as a round checkpoint takes it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


def test_a_loop_resumed_from_its_state_after_round_1_ends_as_one_never_stopped(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, **SETTINGS)
    kept, evaluated, ended = [], [], []
    hooks = RoundHooks(
        on_round_end=lambda log: ended.append(log.round),
        on_states=lambda number, states: evaluated.append((number, sorted(states))),
        eval_rounds=frozenset({1, 2, 3}),
        on_checkpoint=kept.append,
    )
    full = prepare_run(config, progress=False).simulator(hooks=hooks).run()
    assert ended == [1, 2, 3] and [s["next_round"] for s in kept] == [1, 2, 3]
    assert evaluated == [(1, [0, 1, 2]), (2, [0, 1, 2])]  # the final round is the caller's
    # Format 1 of a round checkpoint's "federation": these keys, rounds as plain dicts.
    assert list(kept[-1]) == ["next_round", "states", "aggregate", "bank", "rounds", "rounds_trained", "rng"]
    assert all(type(log) is dict and set(log) == {f.name for f in fields(RoundLog)} for log in kept[-1]["rounds"])

    simulator = prepare_run(config, progress=False).simulator()
    resumed = simulator.run(resume=saved_and_loaded(kept[0]))
    assert simulator.loop.next_round == 3
    assert resumed.client_states.keys() == full.client_states.keys()
    for cid, state in full.client_states.items():
        for key, value in state.items():
            assert torch.equal(value, resumed.client_states[cid][key]), f"client {cid}: {key}"
    assert [(r.round, r.clients, r.train_loss, r.lr, r.bytes_up, r.bytes_down) for r in resumed.rounds] == [
        (r.round, r.clients, r.train_loss, r.lr, r.bytes_up, r.bytes_down) for r in full.rounds
    ]
    assert resumed.rounds_trained == full.rounds_trained
    assert resumed.final_download_bytes == full.final_download_bytes


def test_what_is_not_a_loop_state_is_refused_naming_what_is_wrong():
    loop = RoundLoop([[0], [0]], FedAvgServer(None, []), training=None, states={})
    with pytest.raises(ValueError, match=r"lacks \['aggregate', 'bank', 'rng', 'rounds', 'rounds_trained', 'states'\]"):
        loop.load_state_dict({"next_round": 1})
    with pytest.raises(ValueError, match=r"foreign keys \['round'\]"):
        loop.load_state_dict({"round": 1})
    state = dict.fromkeys(["states", "aggregate", "bank", "rounds_trained", "rng"], {})
    with pytest.raises(ValueError, match="other fields than a RoundLog's"):
        loop.load_state_dict({**state, "next_round": 1, "rounds": [{"round": 1, "loss": 0.5}]})
    with pytest.raises(ValueError, match="it completed 3 rounds, the schedule has 2"):
        loop.load_state_dict({**state, "next_round": 3, "rounds": []})
    assert loop.next_round == 0 and loop.rounds == []  # nothing was loaded
