"""Federations on Flower: any registered method as a Flower app (the `[flower]` extra).

The same federation as `fedbench run`, with its two sides on Flower's runtime:

- `client_app` (a ClientApp): one client per Flower node, its client id the node's
  `partition-id`. A `train` message brings the round and the server's download; the node
  loads its own state from its Flower context, runs the simulator's client-round
  (`FederatedSimulator.client_round`: the same Lightning loop, seeds and checks), keeps its
  whole new state in its context and replies with the method's `upload_keys` only. An
  `evaluate` message scores the node's own model under the run's protocol and replies
  with its metrics. Personal state never leaves the node.
- `MethodStrategy` (a Flower Strategy, driven by `Strategy.start`): Flower's messaging around
  the federation's one server object, of the run's federation kind
  (`benchmark.federation.servers`, which the simulator calls too). It trains each round's
  clients of the server's plan (`client_sampling_schedule`; central: the one union client),
  sends each the server's `download`, hands the uploads to the server's `receive` (the
  method's `aggregate`, in client-id order) and has every partition client scored, with the
  server's `evaluation_download`, on the node that holds its state (the server's `holder`).

Every message carries the run's config, so a node (re)builds the run (`prepare_run`: the
same seeded method, data and partition) from it alone; node-local options (data_root,
device, ...) come from the node's `--node-config`. `FlowerEngine` is the run's engine
(`benchmark.runs.engines`) on Flower: `simulate` runs it on Flower's simulation runtime
(`fedbench flower`); `server_app` is the ServerApp for `flwr run` on a real federation of
SuperNodes, one per client of the plan (docs/scaling-out.md).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from benchmark.config import ConfigError, RunConfig, build_config, load_yaml
from benchmark.errors import DivergenceError
from benchmark.evaluation.client_metrics import evaluate_client
from benchmark.federation.round_loop import FederationResult, RoundHooks, RoundLog
from benchmark.method import State, state_bytes
from benchmark.progress import progress_bar
from benchmark.registry import resolve_method_file
from benchmark.runs.engines import Trained
from benchmark.runs.numerics import computing_as
from benchmark.runs.preparation import autocast_context, prepare_run
from benchmark.runs.reporting import format_summary
from benchmark.runs.runner import run_experiment

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import Strategy
except ImportError as exc:  # imported only by what runs on Flower: `fedbench flower`, `flwr run`
    raise ConfigError(
        f"federations on Flower need the flwr package, which is not installed ({exc}); install the extra "
        "from the fedbench checkout: pip install -c constraints.txt -e '.[flower]'"
    ) from None

# Options a node may set for itself (`flower-supernode --node-config "data-root='/data'"`):
# where things are on that machine, never what changes a result.
NODE_OPTIONS = ("data_root", "attributes", "device", "num_workers", "eval_batch_size")
STATE = "fedbench.state"  # the node's own client state, in its Flower context
NODES_TIMEOUT_S = 600  # how long the server waits for every client's node to connect


# -- state <-> Flower records ------------------------------------------------------------
def to_record(state: State) -> ArrayRecord:
    """Tensors as Flower arrays, bit for bit (bf16 has no NumPy type: sent as its raw int16)."""
    record = ArrayRecord()
    for key, value in state.items():
        value = value.detach().cpu().contiguous()
        if value.dtype == torch.bfloat16:
            key, value = key + "@bf16", value.view(torch.int16)
        record[key] = Array(value.numpy())
    return record


def from_record(record: ArrayRecord) -> State:
    state = {}
    for key, array in record.items():
        value = torch.from_numpy(np.array(array.numpy()))  # a copy: Flower's buffer is read-only
        if key.endswith("@bf16"):
            key, value = key[: -len("@bf16")], value.view(torch.bfloat16)
        state[key] = value
    return state


def config_record(config: RunConfig, round_number: int) -> ConfigRecord:
    return ConfigRecord({"config": json.dumps(config.to_dict()), "round": round_number})


def node_config_overrides(node_config: dict[str, Any]) -> dict[str, Any]:
    """The node's own options (NODE_OPTIONS) from its `--node-config`; partition-id and
    num-partitions are Flower's."""
    options = {}
    for key, value in node_config.items():
        name = key.replace("-", "_")
        if name in ("partition_id", "num_partitions"):
            continue
        if name not in NODE_OPTIONS:
            raise ConfigError(
                f"node config {key!r} is not a node option; a node may set "
                f"{', '.join(o.replace('_', '-') for o in NODE_OPTIONS)} (and Flower's partition-id, num-partitions)"
            )
        options[name] = value
    return options


# -- the client side ---------------------------------------------------------------------
class ClientWorld:
    """What a node builds once per run and process: the prepared run (seeded method, data,
    partition), the simulator whose client-round it runs, and the evaluator."""

    def __init__(self, config: RunConfig) -> None:

        self.run = run = prepare_run(config, progress=False)
        _quiet_node_log()
        self.initial = run.method.client_state()  # every client starts here (the run seed)
        self.simulator = run.simulator()
        self.clients = self.simulator.clients  # the clients that train, by id (central: the union client)
        self.evaluator = run.evaluator()


_WORLD: dict[str, ClientWorld] = {}  # one run per process at a time, keyed by its config


def _not_a_simulation_actor_ending(record) -> bool:
    return not record.getMessage().startswith("Manually terminating ClientAppActor")


def _quiet_node_log() -> None:
    """A node's Flower log once: open_clip's `logging.info` (building the backbone) gave the
    root logger a handler, to which the `flwr` logger propagates every record, DEBUG ones
    included, beside its own handler's copy. Nor the simulation's "Manually terminating
    ClientAppActor" warning, printed by every Ray worker of `fedbench flower` at its normal end."""
    import logging

    logger = logging.getLogger("flwr")
    logger.propagate = False
    if _not_a_simulation_actor_ending not in logger.filters:
        logger.addFilter(_not_a_simulation_actor_ending)


@contextlib.contextmanager
def _on_node(content: RecordDict, context: Context) -> Iterator[tuple[ClientWorld, int, int]]:
    """(the run's world, this node's client id, the round) for a message from the server,
    with the run's computation switches on for the body (`computing_as`), as `fedbench run` has them."""
    sent = content["fedbench"]
    config = build_config(json.loads(str(sent["config"])), node_config_overrides(dict(context.node_config)))
    with computing_as(config):
        key = json.dumps(config.to_dict(), sort_keys=True)
        if key not in _WORLD:
            _WORLD.clear()
            _WORLD[key] = ClientWorld(config)
        world = _WORLD[key]
        if "partition-id" not in context.node_config:
            raise ConfigError('this node has no partition-id: start it with --node-config "partition-id=K"')
        cid = int(context.node_config["partition-id"])
        clients = len(world.clients)
        if not 0 <= cid < clients:
            raise ConfigError(f"this node's partition-id is {cid}, but the run has clients 0..{clients - 1}")
        yield world, cid, int(sent["round"])


def _own_state(world: ClientWorld, context: Context) -> State:
    """The node's state: what its last local training left, or the initial state."""
    return from_record(context.state[STATE]) if STATE in context.state.array_records else world.initial


def _received(content: RecordDict) -> State | None:
    return from_record(content["download"]) if "download" in content.array_records else None


def client_describe(content: RecordDict, context: Context) -> RecordDict:
    """Which client this node holds, and its training-set size."""
    with _on_node(content, context) as (world, cid, _):
        n_i = world.clients[cid].num_samples
    return RecordDict({"client": MetricRecord({"client-id": cid, "num-examples": n_i})})


def client_train(content: RecordDict, context: Context) -> RecordDict:
    """The node's client-round: its own state, the download, the simulator's local training;
    the whole new state stays in the node's context, the upload goes back."""
    with _on_node(content, context) as (world, cid, round_number):
        trained = world.simulator.client_round(cid, round_number - 1, _own_state(world, context), _received(content))
    context.state[STATE] = to_record(trained.state)
    metrics = MetricRecord(
        {
            "client-id": cid,
            "num-examples": world.clients[cid].num_samples,
            "train-loss": trained.loss,
            "model-seconds": trained.model_seconds,
            "data-seconds": trained.data_seconds,
            "optimizer-seconds": trained.optimizer_seconds,
            **({"lr": trained.lr} if trained.lr is not None else {}),
        }
    )
    return RecordDict({"upload": to_record(trained.upload), "metrics": metrics})


def client_evaluate(content: RecordDict, context: Context) -> RecordDict:
    """The node's model (its state, with the download if one came) under the run's protocol,
    on the test data of the client the message names (the node's own, or under central every
    client's); the node's own state is left as it was."""

    with _on_node(content, context) as (world, node_cid, _):
        cid = int(content["fedbench"].get("client", node_cid))
        run, method = world.run, world.run.method
        method.load_client_state(_own_state(world, context))
        if (received := _received(content)) is not None:
            method.load_client_state(received)
        with autocast_context(run.device, run.precision):
            metrics = evaluate_client(
                world.evaluator,
                run.protocol,
                run.dataset,
                run.partition,
                run.partition.clients[cid],
                method.client_state(),
            )
    return RecordDict({"metrics": MetricRecord({"client-id": cid, **metrics})})


client_app = ClientApp()


@client_app.query()
def describe(msg: Message, context: Context) -> Message:
    return Message(client_describe(msg.content, context), reply_to=msg)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    return Message(client_train(msg.content, context), reply_to=msg)


@client_app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return Message(client_evaluate(msg.content, context), reply_to=msg)


# -- the server side ---------------------------------------------------------------------
def _replies(replies: Iterable[Message], what: str, expected: int) -> dict[int, RecordDict]:
    """client id -> reply content; a client's error (divergence included) stops the run."""
    by_client: dict[int, RecordDict] = {}
    for reply in replies:
        if reply.has_error():
            reason = reply.error.reason  # the node's traceback, as Flower reports it
            for error in (DivergenceError, ConfigError):  # the node's own message, as `fedbench run` gives it
                if found := re.search(rf"\b{error.__name__}: (.+)", reason):
                    raise error(found.group(1).strip())
            raise RuntimeError(f"a Flower client failed during {what}: {reason}")
        by_client[int(reply.content["metrics"]["client-id"])] = reply.content
    if len(by_client) != expected:
        raise RuntimeError(
            f"{what}: {len(by_client)} of {expected} clients replied; a node stopped or timed out "
            "(its log says why), and a federation with missing clients is not the run it was configured as"
        )
    return by_client


class MethodStrategy(Strategy):
    """The method's server as a Flower Strategy: `configure_train` sends each of the
    round's clients its download, `aggregate_train` applies the method's `aggregate`,
    `configure_evaluate` / `aggregate_evaluate` score every client on its node in the
    rounds `fedbench run` evaluates. Every rule is `server`'s (`benchmark.federation.server.Server`)."""

    def __init__(
        self, run, nodes: dict[int, int], on_round_end: Callable, on_evaluate: Callable, eval_rounds: frozenset[int]
    ) -> None:
        self.run, self.nodes = run, nodes
        self.on_round_end, self.on_evaluate, self.eval_rounds = on_round_end, on_evaluate, eval_rounds
        self.plan = plan = run.plan()
        self.clients = {c.client_id: c for c in plan.clients}
        self.server = run.server(run.method, plan.clients, run.settings.aggregation)
        self.result = FederationResult({}, rounds_trained=self.server.rounds_trained)
        self.final_scores: dict[int, dict[str, float]] = {}
        self._log: RoundLog | None = None

    def summary(self) -> None:
        pass  # Strategy.start logs this; the run's own summary is the run folder

    def _message(
        self, cid: int, round_number: int, kind: str, download: State | None, scored: int | None = None
    ) -> Message:
        """To the node of client `cid`; an evaluation names the client it scores (`scored`)."""
        sent = config_record(self.run.config, round_number)
        if scored is not None:
            sent["client"] = scored
        content = RecordDict({"fedbench": sent})
        if download is not None:
            content["download"] = to_record(download)
        return Message(content, dst_node_id=self.nodes[cid], message_type=kind)

    def configure_train(self, server_round: int, arrays, config, grid) -> list[Message]:
        sampled = self.plan.schedule[server_round - 1]
        self._log = RoundLog(server_round, sampled, {}, 0, 0, 0.0, 0.0)
        self._started = time.perf_counter()
        messages = []
        for cid in sampled:
            download = self.server.download(cid, server_round - 1)
            self._log.bytes_down += state_bytes(download) if download is not None else 0
            messages.append(self._message(cid, server_round, MessageType.TRAIN, download))
        return messages

    def aggregate_train(self, server_round: int, replies) -> tuple[ArrayRecord | None, MetricRecord | None]:
        log = self._log
        by_client = _replies(replies, f"round {server_round}'s training", len(log.clients))
        uploads = []
        for cid in log.clients:  # the simulator's order: the sum in `aggregate` is order-sensitive
            metrics, upload = by_client[cid]["metrics"], from_record(by_client[cid]["upload"])
            if int(metrics["num-examples"]) != self.clients[cid].num_samples:
                raise RuntimeError(
                    f"client {cid} trained on {int(metrics['num-examples'])} images, the server's partition gives it "
                    f"{self.clients[cid].num_samples}: the node's data differs from the server's"
                )
            log.train_loss[cid] = float(metrics["train-loss"])
            if "lr" in metrics:
                log.lr[cid] = float(metrics["lr"])
            log.model_seconds += float(metrics["model-seconds"])
            log.data_seconds += float(metrics["data-seconds"])
            log.optimizer_seconds += float(metrics["optimizer-seconds"])
            log.bytes_up += state_bytes(upload)
            uploads.append((cid, upload))
        self.server.receive(server_round - 1, uploads)
        log.total_seconds = time.perf_counter() - self._started
        self.result.rounds.append(log)
        self.on_round_end(log)
        return ArrayRecord(), MetricRecord({"train-loss": float(np.mean(list(log.train_loss.values())))})

    def configure_evaluate(self, server_round: int, arrays, config, grid) -> list[Message]:
        if server_round not in self.eval_rounds:
            return []
        messages, last = [], server_round == len(self.plan.schedule)
        for client in self.run.partition.clients:
            holder = self.server.holder(client.client_id)  # the trained client whose state scores it
            download = self.server.evaluation_download(holder)  # the simulator's rule: the server's
            if download is not None and last:
                self.result.final_download_bytes += state_bytes(download)
            messages.append(self._message(holder, server_round, MessageType.EVALUATE, download, client.client_id))
        return messages

    def aggregate_evaluate(self, server_round: int, replies) -> MetricRecord | None:
        if server_round not in self.eval_rounds:
            return None
        by_client = _replies(replies, f"round {server_round}'s evaluation", len(self.run.partition.clients))
        per_client = {  # in partition order, as `fedbench run` averages them
            c.client_id: {k: float(v) for k, v in by_client[c.client_id]["metrics"].items() if k != "client-id"}
            for c in self.run.partition.clients
        }
        if server_round == len(self.plan.schedule):
            self.final_scores = per_client  # the caller records the final round
            return None
        self.on_evaluate(server_round, per_client)
        return None


def connect(grid: Grid, run) -> dict[int, int]:
    """Wait (up to NODES_TIMEOUT_S) for one node per client of the run's plan (central: one) and
    ask each which client it holds: client id -> node id. Clients held by no node or by several
    are an error naming them."""
    clients = len(run.plan().clients)
    deadline = time.monotonic() + NODES_TIMEOUT_S
    while len(nodes := list(grid.get_node_ids())) < clients and time.monotonic() < deadline:
        time.sleep(0.2)
    content = RecordDict({"fedbench": config_record(run.config, 0)})
    asked = [Message(content, dst_node_id=node, message_type=MessageType.QUERY) for node in nodes]
    replies = list(grid.send_and_receive(asked))
    holders: dict[int, list[int]] = {}
    for reply in replies:
        if reply.has_error():
            raise RuntimeError(f"a Flower node could not set up the run: {reply.error.reason}")
        holders.setdefault(int(reply.content["client"]["client-id"]), []).append(reply.metadata.src_node_id)
    wrong = {cid: ids for cid, ids in holders.items() if len(ids) > 1}
    missing = sorted(set(range(clients)) - set(holders))
    if wrong or missing:
        waited = f" within {NODES_TIMEOUT_S} s" if len(nodes) < clients else ""
        raise ConfigError(
            f"every client needs exactly one Flower node, partition-id 0..{clients - 1}: partition-ids held twice "
            f"{sorted(wrong)}, missing {missing} ({len(nodes)} nodes connected{waited}); give every SuperNode its own "
            f'client, --node-config "partition-id=K num-partitions={clients}", one for each K'
        )
    return {cid: ids[0] for cid, ids in holders.items()}


def _check_trains(run) -> None:
    if not run.method.trains:
        raise ConfigError(
            f"method {run.method.name!r} trains nothing, so there is no federation to run on Flower; "
            "score it with `fedbench run`"
        )


def federate(grid: Grid, run, on_round_end, on_evaluate, eval_rounds) -> tuple[FederationResult, dict]:
    """The run's rounds on the nodes of `grid`: the federation (its `client_states` empty: they
    stay with the clients) and every client's metrics after the last round."""
    _check_trains(run)
    with computing_as(run.config):  # a ServerApp thread does not inherit the caller's settings
        strategy = MethodStrategy(run, connect(grid, run), on_round_end, on_evaluate, eval_rounds)
        strategy.start(grid, ArrayRecord(), num_rounds=len(strategy.plan.schedule), timeout=24 * 3600)
    return strategy.result, strategy.final_scores


class FlowerEngine:
    """The run's engine on Flower (`benchmark.runs.engines.Engine`): `runtime(run, on_round_end,
    on_evaluate, eval_rounds)` runs the rounds on Flower's nodes (`federate` on a grid) and
    returns the federation and the final scores its nodes gave; an evaluated round's scores go
    to `on_evaluate`. No round checkpoints: it runs from round 1."""

    checkpoints = False
    trains_here = False  # the nodes train: the server prepares no training inputs

    def __init__(self, runtime: Callable) -> None:
        self.runtime = runtime

    def check(self, config: RunConfig) -> None:
        if config.finetune_epochs or config.evaluate_from:
            raise ConfigError(
                "--finetune-epochs and evaluating a saved run run in process only "
                "(the clients' states stay on Flower's clients): use `fedbench run` / `fedbench evaluate`"
            )
        if config.optimizer_state != "per_client" or config.select_round != "final":
            raise ConfigError(
                "optimizer_state = shared and select_round = best_local_test (the authors' rules) run in process "
                "only: Flower's clients keep no optimizer between rounds and the server does not keep every "
                "round's states; use `fedbench run`"
            )

    def train(self, run, hooks: RoundHooks, resume=None) -> Trained:
        _check_trains(run)  # before Flower starts
        # The rounds as `fedbench run` shows them (Flower's own log is quiet: `quiet_flower`).
        bar = progress_bar(
            total=len(run.schedule),
            desc=f"training {run.config.method}",
            unit="rounds",
            enabled=hooks.progress,
            leave=False,
        )

        def on_round_end(log: RoundLog) -> None:
            hooks.on_round_end(log)
            bar.set_postfix(loss=f"{np.mean(list(log.train_loss.values())):.3f}")
            bar.update()

        try:
            federation, scores = self.runtime(run, on_round_end, hooks.on_scores, hooks.eval_rounds)
        finally:
            bar.close()
        federation.rounds_trained = run.server.rounds_trained_of(federation.rounds_trained, run.partition.clients)
        return Trained(federation, {}, scores)


# -- running it --------------------------------------------------------------------------
@contextlib.contextmanager
def quiet_flower() -> Iterator[None]:
    """Flower's warnings and errors, once each, and nothing else: fedbench prints the rounds
    (a labelled progress bar) and the results itself. Without this a 2-round run printed 89
    lines: Flower's INFO strategy log (its own handler), every record again through the root
    logger (open_clip's `logging.info` calls basicConfig, and the `flwr` logger, at DEBUG,
    propagates to it), Flower's deprecation of `run_simulation` (the local simulation is what
    `fedbench flower` is; `flwr run` is the way to a real federation, docs/scaling-out.md)
    twice, and Ray's FutureWarning about accelerator variables for a CPU-only actor."""
    import logging
    import warnings

    logger = logging.getLogger("flwr")
    levels = [(h, h.level) for h in logger.handlers]
    propagate = logger.propagate

    def wanted(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("DEPRECATED FEATURE: The `run_simulation` function")

    logger.propagate = False
    logger.addFilter(wanted)
    for handler, _ in levels:
        handler.setLevel(max(handler.level, logging.WARNING))
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
            yield
    finally:
        logger.removeFilter(wanted)
        logger.propagate = propagate
        for handler, level in levels:
            handler.setLevel(level)


def simulate(parallel: int = 1, client_cpus: int = 1, client_gpus: float = 0.0) -> FlowerEngine:
    """The engine running the federation on Flower's simulation runtime: one virtual SuperNode
    per client of the run's plan, `parallel` ClientApps at a time, each with `client_cpus`
    CPUs (its torch threads) and `client_gpus` GPUs."""
    from flwr.simulation import run_simulation

    def runtime(run, on_round_end, on_evaluate, eval_rounds):
        outcome: list = []
        app = ServerApp()

        @app.main()
        def main(grid: Grid, context: Context) -> None:
            outcome.append(federate(grid, run, on_round_end, on_evaluate, eval_rounds))

        resources = {"num_cpus": client_cpus, "num_gpus": client_gpus}
        init = {"num_cpus": parallel * client_cpus}
        if client_gpus:
            init["num_gpus"] = parallel * client_gpus
        with quiet_flower():
            run_simulation(
                app,
                client_app,
                num_supernodes=len(run.plan().clients),
                backend_config={"client_resources": resources, "init_args": init},
            )
        if not outcome:
            raise RuntimeError("the Flower simulation ended without a result (its log above says why)")
        return outcome[0]

    return FlowerEngine(runtime)


def config_from_run_config(run_config: dict[str, Any]) -> RunConfig:
    """The run of Flower's run config (`[tool.flwr.app.config]` of flower/pyproject.toml,
    `flwr run --run-config`): `config` names a fedbench YAML file; any other key is a run
    option that overrides it."""

    options = dict(run_config)
    path = str(options.pop("config", "") or "")
    if not path:
        raise ConfigError(
            "the Flower run config names no fedbench YAML: flwr run flower/ <superlink> --run-config "
            "\"config='/abs/path/run.yaml'\" (write one with `fedbench run ... --print-config > run.yaml`)"
        )
    return resolve_method_file(build_config(load_yaml(path), options))


server_app = ServerApp()


@server_app.main()
def serve(grid: Grid, context: Context) -> None:
    """`flwr run`: the run of Flower's run config, written to its run folder on the server."""

    config = config_from_run_config(dict(context.run_config))
    result = run_experiment(config, progress=False, engine=FlowerEngine(lambda *a: federate(grid, *a)))
    print(format_summary(result.summary, result.timing))
    print(f"run folder: {result.run_dir}")
