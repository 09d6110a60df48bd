"""The federation's server (`benchmark.federation.server.Server`): its rules -- the download,
the aggregation, the evaluated state -- are written once, and the in-process simulator,
Flower's strategy and the bare loop `fedbench bench` measures all call that one object.

"Defined once" is checked by who calls the method's own `download` and `aggregate` in a
real federation of each runtime: only `Server`'s methods, found by the caller's code
object (its qualified name), never a copy of the rule elsewhere."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import torch

from benchmark.federation.server import Server, check_finite
from benchmark.method import ClientUpdate
from data.partition import ClientShard


def watch(method) -> Counter:
    """Count (hook, caller) for every call of `method`'s `download` and `aggregate`."""
    calls: Counter = Counter()
    for hook in ("download", "aggregate"):
        original = getattr(method, hook)

        def spy(*args, _hook=hook, _original=original, **kwargs):
            calls[_hook, sys._getframe(1).f_code.co_qualname] += 1
            return _original(*args, **kwargs)

        setattr(method, hook, spy)
    return calls


def callers(calls: Counter, hook: str) -> set[str]:
    return {caller for (h, caller) in calls if h == hook}


class Averaged:
    """A stand-in method: FedAvg of a weight, the download is the aggregate."""

    name = "averaged"
    evaluate_after_download = True

    def aggregate(self, updates):
        total = sum(u.weight for u in updates)
        return {"w": sum(u.state["w"] * (u.weight / total) for u in updates)}

    def download(self, cid, aggregate, bank):
        return dict(aggregate)


def shards(*sizes: int) -> list[ClientShard]:
    return [ClientShard(cid, tuple(range(n)), ()) for cid, n in enumerate(sizes)]


def test_the_server_downloads_aggregates_by_the_runs_weights_and_banks_the_uploads():
    server = Server(Averaged(), shards(1, 3), "samples")
    assert server.download(0, 0) is None  # round 1: nothing to send yet
    server.receive(0, [(0, {"w": torch.tensor([0.0])}), (1, {"w": torch.tensor([4.0])})])
    assert torch.equal(server.aggregate["w"], torch.tensor([3.0]))  # 1/4 * 0 + 3/4 * 4
    assert torch.equal(server.download(0, 1)["w"], torch.tensor([3.0]))
    assert set(server.bank) == {0, 1} and server.rounds_trained == {0: 1, 1: 1}
    assert server.client_update(1, {}) == ClientUpdate(1, 3, {}, 3)
    assert Server(Averaged(), shards(1, 3), "uniform").client_update(1, {}).weight == 1.0


def test_the_evaluated_state_is_the_download_unless_the_method_keeps_its_own():
    method = Averaged()
    server = Server(method, shards(2, 2), "samples")
    server.receive(0, [(0, {"w": torch.tensor([2.0])})])  # client 1 never trained
    assert server.evaluation_download(0) is not None and server.evaluation_download(1) is not None
    method.evaluate_after_download = False  # pFedMoAP: evaluates what its training left
    assert server.evaluation_download(0) is None
    assert server.evaluation_download(1) is not None  # it has nothing of its own


def test_a_non_finite_aggregate_stops_the_run_naming_the_round():
    from benchmark.errors import DivergenceError

    server = Server(Averaged(), shards(1), "samples")
    with pytest.raises(DivergenceError, match=r"round 3: the server's aggregate holds non-finite values in w"):
        server.receive(2, [(0, {"w": torch.tensor([float("nan")])})])
    check_finite(Averaged(), {"w": torch.ones(2)}, "a state", 0, None)  # finite: no error


def test_the_simulator_and_the_bare_loop_call_the_one_server(fake_data_root, tmp_path):
    from conftest import tiny_config

    from benchmark.federation.bare_loop import run_bare
    from benchmark.runs.preparation import prepare_run

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=2, clients=3, participation=0.67)
    run = prepare_run(config, progress=False)
    calls = watch(run.method)
    simulator = run.simulator()
    assert isinstance(simulator.server, Server)
    simulator.run()
    assert callers(calls, "download") == {"Server.download", "Server.evaluation_download"}
    assert callers(calls, "aggregate") == {"Server.receive"}
    assert calls["aggregate", "Server.receive"] == 2  # once a round
    assert calls["download", "Server.evaluation_download"] == 3  # every client, once, after the last round

    run = prepare_run(config, progress=False)
    calls = watch(run.method)
    run_bare(run.simulator())
    assert callers(calls, "download") == {"Server.download"}  # it trains; it does not evaluate
    assert callers(calls, "aggregate") == {"Server.receive"}


def test_flowers_strategy_calls_the_one_server(toy_test_checkpoint, tmp_path, monkeypatch):
    # One round of MethodStrategy in this process: the nodes' replies are the ClientApp's own.
    from flwr.app import Context, Message, MessageType, RecordDict
    from flwr.supercore.task_identity import TaskIdentity
    from test_flower import PFEDMMA, toy_config

    from benchmark.runs import flower
    from benchmark.runs.preparation import prepare_run

    for name, value in (("_run_id", 1), ("_node_id", 1), ("_task_id", 1)):  # what Flower's runtime would set
        monkeypatch.setattr(TaskIdentity, name, value)
    config = toy_config(tmp_path, "pfedmma", **PFEDMMA)
    run = prepare_run(config, progress=False, train_features=False)
    calls = watch(run.method)
    nodes = {c.client_id: 100 + c.client_id for c in run.partition.clients}
    evaluated = []
    strategy = flower.MethodStrategy(run, nodes, lambda log: None, lambda *a: evaluated.append(a), frozenset({1}))
    assert isinstance(strategy.server, Server)
    contexts = {
        cid: Context(run_id=1, node_id=node, node_config={"partition-id": cid}, state=RecordDict(), run_config={})
        for cid, node in nodes.items()
    }

    def answer(messages, app):
        by_node = {node: cid for cid, node in nodes.items()}
        return [Message(app(m.content, contexts[by_node[m.metadata.dst_node_id]]), reply_to=m) for m in messages]

    sent = strategy.configure_train(1, None, None, None)
    assert all(m.metadata.message_type == MessageType.TRAIN for m in sent)
    strategy.aggregate_train(1, answer(sent, flower.client_train))
    asked = strategy.configure_evaluate(1, None, None, None)
    strategy.aggregate_evaluate(1, answer(asked, flower.client_evaluate))
    strategy.configure_train(2, None, None, None)
    assert callers(calls, "download") == {"Server.download", "Server.evaluation_download"}
    assert callers(calls, "aggregate") == {"Server.receive"}
    assert strategy.server.rounds_trained == {cid: 1 for cid in nodes} and len(evaluated) == 1
