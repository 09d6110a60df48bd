"""The federated simulator: rounds x sampled clients x local epochs, one resident module.

Each round: every sampled client gets its own state swapped into the one resident
method module, receives the server's download, trains (`benchmark.federation.client_loop`: the
module's Lightning hooks with a fresh optimizer and scheduler, so nothing leaks from the
previous client), and uploads. The server (`benchmark.federation.server.Server`, the one
object whose rules Flower's strategy and the bare loop call too) aggregates the uploads
(the method's `aggregate`) and keeps a bank of each client's latest upload. State is plain
name -> tensor dicts throughout.

After the last round every client is evaluated with the server's `evaluation_download`:
the final download (the method's `download` with the last aggregate and the bank), unless
the method evaluates the state its own training left (`evaluate_after_download = False`,
pFedMoAP). One rule holds for every method: a client that never trained (possible under
partial participation) always receives the final download, since it has no state of its
own to evaluate; the run flags it (`rounds_trained` = 0 in metrics.csv,
`clients_never_trained` in summary.json).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, default_collate

from benchmark import flops
from benchmark.backbone import computing_key
from benchmark.config import SAMPLING_RULES
from benchmark.federation.batched_training import BatchedTraining, BatchingRefused, ClientDiverged, probe
from benchmark.federation.client_loop import ClientLoop, ClientRoundTraining, NonFiniteLoss
from benchmark.federation.features import ViewFeatures
from benchmark.federation.loading import ScheduleStream, steps_per_epoch
from benchmark.federation.server import Server, check_finite, divergence
from benchmark.federation.servers.fedavg import FedAvgServer
from benchmark.federation.stacked import BatchingProbe
from benchmark.method import ClientContext, FederatedMethod, State, state_bytes
from benchmark.progress import progress_bar
from data.augmentation import view_seed
from data.base import LabeledImages
from data.decoded import DeviceImages
from data.partition import ClientShard


def clients_per_round(rule: str, num_clients: int, participation: float) -> int:
    """How many clients a sampled round trains. "authors": int(participation * N), the
    expression of the FedOTP / FedPGP / pFedMMA code (a float floor: 0.29 * 100 gives 28);
    "uniform": the nearest integer. At least 1 either way."""
    if rule == "authors":
        return max(1, int(participation * num_clients))
    if rule == "uniform":
        return max(1, round(participation * num_clients))
    raise ValueError(f"client_sampling must be one of {', '.join(SAMPLING_RULES)}, got {rule!r}")


def client_sampling_schedule(
    num_clients: int, participation: float, rounds: int, seed: int, rule: str = "authors"
) -> list[list[int]]:
    """The clients of every round, fixed by (clients, participation, rounds, seed, rule)
    alone, so every method sees the same stream.

    "authors" (default): round 1 trains every client, later rounds sample
    `clients_per_round` without replacement, as the FedOTP, FedPGP and pFedMMA code does.
    "uniform": every round, the first included, samples `clients_per_round`.
    With full participation both give every client every round."""
    per_round = clients_per_round(rule, num_clients, participation)
    everyone = list(range(num_clients))
    rng = np.random.default_rng([seed, 0x5EED])
    schedule = []
    for round_index in range(rounds):
        if per_round >= num_clients or (rule == "authors" and round_index == 0):
            schedule.append(list(everyone))
        else:
            schedule.append(sorted(rng.choice(num_clients, per_round, replace=False).tolist()))
    return schedule


def describe_sampling(rule: str, num_clients: int, participation: float) -> str:
    """For plans and summaries, e.g. "authors (round 1: all 100 clients, then 10 of 100 per round)"."""
    per_round = clients_per_round(rule, num_clients, participation)
    if per_round >= num_clients:
        return f"{rule} (all {num_clients} clients every round)"
    if rule == "authors":
        return f"{rule} (round 1: all {num_clients} clients, then {per_round} of {num_clients} per round)"
    return f"{rule} ({per_round} of {num_clients} clients every round)"


def client_seed(seed: int, round_index: int, client_id: int) -> int:
    """Randomness of one client-round, independent of the order clients are run in."""
    return int(np.random.SeedSequence([seed, round_index, client_id]).generate_state(1)[0])


def seed_torch(seed: int) -> None:
    """`torch.manual_seed` for the devices a run uses: the CPU and, once a run has put its
    model there, CUDA. Cheaper per client-round than torch.manual_seed, which queues a lazy
    seeding (with a captured stack trace) for every backend not in use, and than
    `torch.cuda.is_available()`, which retries the driver on a machine without one (~0.4 ms)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


class ClientTrainSet(Dataset):
    """A client's training images with labels mapped into its own label space.

    Items are fetched by (epoch, position) (see `EpochTaggedSampler`). An image's random
    augmentation is drawn from a generator seeded by (client-round seed, epoch, position),
    never from whatever RNG state the loading process has, so results are the same with
    any `num_workers` (each worker's RNG would otherwise depend on the worker layout).
    """

    def __init__(
        self,
        images: LabeledImages | torch.Tensor | DeviceImages,
        labels: Sequence[int],
        shard: ClientShard,
        seed: int = 0,
    ) -> None:
        # a LabeledImages split, precomputed features [N, D], or the split decoded on the device
        # (`--augment-backend device`: augmented a batch at a time there, `data.decoded`)
        self.images = images
        # (cache, key prefix, encoder): features of augmented batches shared across methods
        # (`features.ViewFeatures`); set by the simulator for frozen-image-tower methods
        self.shared: tuple[ViewFeatures, tuple, Callable[[torch.Tensor], torch.Tensor]] | None = None
        self.indices = list(shard.train_indices)
        to_local = {c: i for i, c in enumerate(shard.train_classes)}
        self.labels = [to_local[labels[i]] for i in self.indices]
        self.seed = seed

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, key: int | tuple[int, int]):
        epoch, i = key if isinstance(key, tuple) else (0, key)
        index = self.indices[i]
        if isinstance(self.images, torch.Tensor):  # cached features: nothing random
            return self.images[index], self.labels[i]
        if isinstance(self.images, DeviceImages):  # one view, as a batch of one
            return self.images.views(self.seed, [(epoch, i, index)])[0], self.labels[i]
        with torch.random.fork_rng(devices=[]):  # torchvision's random transforms draw from torch's CPU RNG
            torch.default_generator.manual_seed(view_seed(self.seed, epoch, i))
            image = self.images.load(index)
        return image, self.labels[i]

    def batch(self, keys: Sequence[tuple[int, int]]):
        """The items of `keys` collated as a DataLoader collates them; cached features are
        gathered in one indexing instead of one tensor per item. With `shared` set, the
        batch's frozen features in place of its images, computed once per process."""
        if self.shared is not None and not isinstance(self.images, torch.Tensor):
            cache, prefix, encode = self.shared
            key = (*prefix, self.seed, tuple((epoch, i, self.indices[i]) for epoch, i in keys))
            features = cache.batch(key, lambda: encode(self._images(keys)[0]), pool=prefix[1])  # the feature kind
            return [features, torch.tensor([self.labels[i] for _, i in keys])]
        return self._images(keys)

    def _images(self, keys: Sequence[tuple[int, int]]):
        if isinstance(self.images, torch.Tensor):
            positions = [i for _, i in keys]
            inputs = self.images[[self.indices[i] for i in positions]]
            return [inputs, torch.tensor([self.labels[i] for i in positions])]
        if isinstance(self.images, DeviceImages):  # every view of the batch in one resample on the device
            views = [(epoch, i, self.indices[i]) for epoch, i in keys]
            return [self.images.views(self.seed, views), torch.tensor([self.labels[i] for _, i in keys])]
        return default_collate([self[key] for key in keys])


class EpochTaggedSampler(Sampler):
    """Yields (epoch, position) in a shuffled order that is a function of (seed, epoch) only --
    not of how many iterators the loader made or of generator draws that depend on the
    worker layout -- so each local epoch gets its own order and its own augmentations.
    Lightning calls `set_epoch` at the start of every epoch; without it, passes are counted."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed, self.epoch = size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.size

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1
        order_seed = int(np.random.SeedSequence([self.seed, epoch]).generate_state(1, np.uint64)[0])
        for position in torch.randperm(self.size, generator=torch.Generator().manual_seed(order_seed)).tolist():
            yield epoch, position


class ClientBatches:
    """A client-round's training batches, one pass per iteration: the order of
    `EpochTaggedSampler`, collated as a DataLoader collates. With `num_workers` > 0 a
    DataLoader's worker processes load them; in this process (0) they are collated
    directly, without a DataLoader iterator's per-pass setup (~0.1 ms a pass)."""

    def __init__(self, dataset: ClientTrainSet, batch_size: int, seed: int, num_workers: int) -> None:
        self.dataset, self.batch_size = dataset, batch_size
        self.sampler = EpochTaggedSampler(len(dataset), seed)
        self.loader = None
        if num_workers > 0 and not isinstance(dataset.images, DeviceImages):  # device images: no worker
            self.loader = DataLoader(
                dataset,
                batch_size=batch_size,
                sampler=self.sampler,
                num_workers=num_workers,
                generator=torch.Generator().manual_seed(seed),  # seeds the workers' RNGs, which nothing here draws from
            )

    def __len__(self) -> int:
        return steps_per_epoch(len(self.dataset), self.batch_size)

    def __iter__(self):
        if self.loader is not None:
            yield from self.loader
            return
        keys = list(self.sampler)
        for start in range(0, len(keys), self.batch_size):
            yield self.dataset.batch(keys[start : start + self.batch_size])


class ClientSets:
    """(round index, client id) -> that client-round's `ClientTrainSet`: what a worker of the
    schedule's one loader (`benchmark.federation.loading`) builds its items from."""

    def __init__(self, images, labels: Sequence[int], shards: dict[int, ClientShard], seeds: dict) -> None:
        self.images, self.labels, self.shards, self.seeds = images, list(labels), shards, seeds

    def __call__(self, round_index: int, cid: int) -> ClientTrainSet:
        return ClientTrainSet(self.images, self.labels, self.shards[cid], self.seeds[round_index, cid])


class StreamBatches:
    """`steps` batches per iteration (one local epoch of a central run's client), drawn from
    consecutive shuffled passes over its images (`EpochTaggedSampler`'s passes 0, 1, ...)
    that go on across the iterations of one client-round. When the steps are one pass (the
    clients' sizes multiples of the batch size) an epoch is the same as a one-client
    federation's epoch on the union, batch for batch."""

    def __init__(self, dataset, batch_size: int, seed: int, steps: int) -> None:
        self.dataset, self.batch_size, self.steps = dataset, batch_size, steps
        self._keys = self._stream(EpochTaggedSampler(len(dataset), seed))

    def __len__(self) -> int:
        return self.steps

    @staticmethod
    def _stream(sampler: EpochTaggedSampler):
        while True:
            yield from sampler  # each pass is the sampler's next epoch

    def __iter__(self):
        for _ in range(self.steps):
            yield self.dataset.batch([next(self._keys) for _ in range(self.batch_size)])


@dataclass
class RoundLog:
    round: int
    clients: list[int]
    train_loss: dict[int, float]
    bytes_up: int
    bytes_down: int
    model_seconds: float  # forward + backward + optimizer step, summed over batches
    total_seconds: float  # the whole round: state swaps, optimizer setup, data loading, aggregation
    train_flops: int = 0  # executed by the round's training steps (benchmark.flops; 0 when not counted)
    data_seconds: float = 0.0  # fetching and collating the training batches
    optimizer_seconds: float = 0.0  # the method's configure_optimizers, once per client-round
    lr: dict[int, float] = field(default_factory=dict)  # client -> the lr its client-round started at


@dataclass
class ClientRound:
    """What one client's local training left: its whole state (kept by the client) and the
    part of it that is uploaded (the method's `upload_keys`)."""

    state: State
    upload: State
    loss: float  # mean training loss of the client-round
    model_seconds: float
    data_seconds: float
    optimizer_seconds: float
    lr: float | None = None  # the lr the client-round started at (None: no optimizer)


@dataclass
class FederationResult:
    client_states: dict[int, State]  # each client's personalized state for evaluation
    rounds: list[RoundLog] = field(default_factory=list)
    final_download_bytes: int = 0
    rounds_trained: dict[int, int] = field(default_factory=dict)  # client -> rounds it trained in ({}: nothing trains)

    @property
    def never_trained(self) -> list[int]:
        """Clients that never trained: evaluated with the final download alone."""
        return sorted(cid for cid, n in self.rounds_trained.items() if n == 0)


@dataclass
class FederationSnapshot:
    """Everything the simulator needs to continue after round `next_round` - 1 exactly as if
    it had never stopped: every client's state, the server's aggregate and bank, the rounds
    so far and the RNG states. Plain tensors and numbers, so `torch.save` writes it."""

    next_round: int  # 0-based index of the first round still to run
    states: dict[int, State]
    aggregate: State
    bank: dict[int, State]
    rounds: list[RoundLog]
    rounds_trained: dict[int, int]
    rng: dict[str, Any]


def rng_states() -> dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    np.random.set_state(states["numpy"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


@dataclass
class FederationSettings:
    """How the simulator runs a federation: the device and precision of local training, its
    data loading and epochs, the server's client weights, and whether a round's clients may
    train in one batched pass."""

    accelerator: str = "cpu"
    precision: str = "32-true"
    num_workers: int = 0
    batch_size: int = 32
    local_epochs: int = 1
    aggregation: str = "samples"  # the server's client weights: "samples" (n_i) or "uniform" (1)
    batched_training: bool = False  # a round's clients in one pass where the method allows (batched_training.py)
    optimizer_state: str = "per_client"  # "shared": one optimizer for every client-round (client_loop.ClientLoop)
    schedule_loader: bool = True  # with num_workers > 0 and PIL images: one loader over the whole schedule (loading.py)
    share_views: bool = True  # augmented batches' frozen features computed once per process (features.ViewFeatures)


class FederatedSimulator:
    """Runs one federation for one method; `run()` returns every client's final state."""

    def __init__(
        self,
        method: FederatedMethod,
        train_images: LabeledImages | torch.Tensor | DeviceImages,
        train_labels: Sequence[int],
        class_names: Sequence[str],
        clients: Sequence[ClientShard],
        schedule: list[list[int]],
        seed: int,
        settings: FederationSettings,
        on_round_end: Callable[[RoundLog], None] | None = None,
        progress: bool = True,
        on_snapshot: Callable[[FederationSnapshot], None] | None = None,
        eval_rounds: frozenset[int] = frozenset(),
        on_evaluate: Callable[[int, dict[int, State]], None] | None = None,
        server: type[Server] = FedAvgServer,
        epoch_steps: Sequence[int] | None = None,
        view_features: ViewFeatures | None = None,
    ) -> None:
        self.method = method
        self.view_features = view_features  # shared features of augmented views (frozen image tower)
        # The federation's kind (benchmark.federation.servers) and, where its plan gives them
        # (central), its clients' steps per local epoch, per round.
        self.server_kind = server
        self.epoch_steps = epoch_steps
        self.train_images = train_images
        self.train_labels = list(train_labels)
        self.class_names = list(class_names)
        self.clients = {c.client_id: c for c in clients}
        self.schedule = schedule
        # Every client-round's seed, drawn up front: numpy's SeedSequence costs ~100 us when
        # it runs between training steps (their compute evicts its code and data from the
        # caches), ~7 us in a row.
        self._seeds = {
            (round_index, cid): client_seed(seed, round_index, cid)
            for round_index, sampled in enumerate(schedule)
            for cid in sampled
        }
        # How many rounds each client trained in before each of its rounds: a function of the
        # fixed schedule, so a Flower node knows it without keeping count.
        self._participations: dict[tuple[int, int], int] = {}
        counts: dict[int, int] = {}
        for round_index, sampled in enumerate(schedule):
            for cid in sampled:
                self._participations[round_index, cid] = counts.get(cid, 0)
                counts[cid] = counts.get(cid, 0) + 1
        self.seed = seed
        self.settings = settings
        self.on_round_end = on_round_end
        self.progress = progress
        self.on_snapshot = on_snapshot  # called after every round (the caller decides what to save)
        # Rounds (1-based) after which every client's model is evaluated; the final round is
        # the caller's (it evaluates `FederationResult.client_states`).
        self.eval_rounds = frozenset(r for r in eval_rounds if r < len(schedule))
        self.on_evaluate = on_evaluate
        self.server = self._server()  # a fresh one for every `run`
        self._loop = ClientLoop(settings.accelerator, settings.precision, settings.optimizer_state == "shared")
        self._together: BatchedTraining | None = None
        self._stream: ScheduleStream | None = None  # the run's one loader, where it has one
        self._batching = BatchingProbe(method, "train one by one")
        if settings.batched_training and method.trains and settings.optimizer_state == "shared":
            # one optimizer stepped client after client has no batched equivalent
            self._batching.refuse("optimizer_state = shared steps one optimizer client after client")
        elif settings.batched_training and method.trains:
            try:
                self._together = BatchedTraining(method, self._loop)
            except BatchingRefused as refused:
                self._batching.refuse(str(refused))

    def run(self, resume: FederationSnapshot | None = None) -> FederationResult:
        """Run the rounds of the schedule, or those after `resume`'s (a round checkpoint)."""
        method = self.method
        initial = method.client_state()
        # Every client starts from the same initial state (the method built with the run seed).
        states: dict[int, State] = {cid: {k: v.clone() for k, v in initial.items()} for cid in self.clients}
        if not method.trains:  # nothing changes between rounds: the same state is evaluated
            for round_number in sorted(self.eval_rounds):
                if self.on_evaluate:
                    self.on_evaluate(round_number, states)
            return FederationResult(states)
        server = self.server = self._server()
        first_round = 0
        if resume is not None:
            states.update(resume.states)
            server.restore(resume.aggregate, resume.bank, resume.rounds_trained)
            first_round = resume.next_round
            restore_rng_states(resume.rng)
        result = FederationResult(states, rounds_trained=server.rounds_trained)  # the server keeps the count
        if resume is not None:
            result.rounds = list(resume.rounds)
        name = getattr(self.method, "name", type(self.method).__name__)
        bar = _progress(len(self.schedule), "rounds", self.progress, first_round, f"training {name}")
        self._stream = self._schedule_stream(first_round)
        try:
            for round_index, sampled in enumerate(self.schedule):
                if round_index < first_round:
                    continue
                t_round = time.perf_counter()
                log = RoundLog(round_index + 1, sampled, {}, 0, 0, 0.0, 0.0)
                received = {cid: server.download(cid, round_index) for cid in sampled}
                log.bytes_down += sum(state_bytes(r) for r in received.values() if r is not None)
                account = flops.current()
                before = account.totals.get("train", 0) if account else 0
                trained_clients = self.train_round(sampled, round_index, states, received)
                log.train_flops += (account.totals.get("train", 0) - before) if account else 0
                for cid in sampled:
                    trained = trained_clients[cid]
                    states[cid] = trained.state
                    log.train_loss[cid] = trained.loss
                    if trained.lr is not None:
                        log.lr[cid] = trained.lr
                    log.model_seconds += trained.model_seconds
                    log.data_seconds += trained.data_seconds
                    log.optimizer_seconds += trained.optimizer_seconds
                    log.bytes_up += state_bytes(trained.upload)
                server.receive(round_index, [(cid, trained_clients[cid].upload) for cid in sampled])
                log.total_seconds = time.perf_counter() - t_round
                result.rounds.append(log)
                if self.on_round_end:
                    self.on_round_end(log)
                if self.on_evaluate and log.round in self.eval_rounds:
                    self.on_evaluate(log.round, self.evaluation_states(states)[0])
                if self.on_snapshot:
                    # Shallow copies: the next round replaces entries (never tensors in place), and a
                    # snapshot may be saved only after a stop in the middle of that round.
                    self.on_snapshot(
                        FederationSnapshot(
                            round_index + 1,
                            dict(states),
                            server.aggregate,
                            dict(server.bank),
                            list(result.rounds),
                            dict(result.rounds_trained),
                            rng_states(),
                        )
                    )
                bar.set_postfix(loss=f"{np.mean(list(log.train_loss.values())):.3f}")
                bar.update()
        finally:
            self._loop.release(method)  # the module leaves the Fabric it trained under
            if self._stream is not None:
                self._stream.close()  # its workers end with the run
                self._stream = None
        bar.close()
        result.client_states, result.final_download_bytes = self.evaluation_states(states)
        return result

    def _server(self) -> Server:
        return self.server_kind(self.method, list(self.clients.values()), self.settings.aggregation)

    def finetune(self, states: dict[int, State], epochs: int) -> tuple[dict[int, State], dict[int, float]]:
        """Every client of `states` trains its state for `epochs` local epochs on its own data,
        seeded as a round after the last one (`--finetune-epochs`); `states` is left as it is.
        Returns (the fine-tuned states, each client's mean training loss of the last epoch)."""
        method, round_index = self.method, len(self.schedule)
        tuned, losses = {}, {}
        try:
            for cid in sorted(states):
                self._seeds[round_index, cid] = client_seed(self.seed, round_index, cid)
                method.load_client_state(states[cid])
                trained = self._train_client(cid, round_index, epochs)
                tuned[cid] = method.client_state()
                check_finite(method, tuned[cid], f"the state of client {cid} after fine-tuning", round_index, cid)
                losses[cid] = trained.loss
        finally:
            self._loop.release(method)
        return tuned, losses

    def train_round(
        self, sampled: Sequence[int], round_index: int, states: dict[int, State], received: dict[int, State | None]
    ) -> dict[int, "ClientRound"]:
        """The local training of round `round_index`'s clients: in one batched pass where the
        run asks for it and the method allows it (`batched_training.py`), else one by one."""
        if self._together is not None and len(sampled) > 1:
            together = self._train_together(sampled, round_index, states, received)
            if together is not None:
                return together
        return {cid: self.client_round(cid, round_index, states[cid], received[cid]) for cid in sampled}

    def _train_together(self, sampled, round_index, states, received) -> dict[int, "ClientRound"] | None:
        """`train_round` in one pass; None (and client by client from here on, with a warning)
        when the first round's probe or the method's optimizer rules it out."""
        method = self.method
        starts = [states[cid] if received[cid] is None else {**states[cid], **received[cid]} for cid in sampled]
        clients = []
        for cid in sampled:  # seeded in the client loop's order: each client's batches are its own
            batches, context = self.client_data(cid, round_index)
            clients.append((cid, batches, context))
        trained = None
        if self._batching.allows(lambda: probe(self._together, starts, clients)):
            try:
                trained = self._together.train_together(starts, clients, self.settings.local_epochs)
            except BatchingRefused as refused:
                self._batching.refuse(str(refused))
            except ClientDiverged as bad:
                failure = bad.failure
                raise divergence(method, str(failure), round_index, bad.cid, failure.step, failure.lr) from bad
        if trained is None:
            self._together = None
            return None
        return {
            cid: self._client_round(cid, round_index, state, training)
            for (cid, _, _), (state, training) in zip(clients, trained)
        }

    def client_round(self, cid: int, round_index: int, state: State, received: State | None) -> "ClientRound":
        """One client's part of a round, wherever it runs (this simulator, or a Flower
        ClientApp on the client's own node): its `state`, then the server's download
        `received` (None in round 1) loaded into the resident module, local training, and
        the state and upload it leaves."""
        method = self.method
        method.load_client_state(state if received is None else {**state, **received})  # the download wins
        training = self._train_client(cid, round_index)
        return self._client_round(cid, round_index, method.client_state(), training)

    def _client_round(self, cid: int, round_index: int, trained: State, training: ClientRoundTraining) -> "ClientRound":
        """What client `cid`'s local training left, checked finite, with its upload."""
        check_finite(self.method, trained, f"the state of client {cid} after its local training", round_index, cid)
        return ClientRound(
            trained,
            self.server.upload_of(trained),
            training.loss,
            training.model_seconds,
            training.data_seconds,
            training.optimizer_seconds,
            training.lr,
        )

    def evaluation_states(self, states: dict[int, State]) -> tuple[dict[int, State], int]:
        """Every client's model as evaluated now: its state with the server's
        `evaluation_download` applied where there is one; `states` itself is left as it is.
        Returns (states, bytes of those downloads)."""
        method = self.method
        evaluated, download_bytes = dict(states), 0
        for cid, state in states.items():
            received = self.server.evaluation_download(cid)
            if received is not None:
                method.load_client_state(state)
                method.load_client_state(received)
                download_bytes += state_bytes(received)
                evaluated[cid] = method.client_state()
        return evaluated, download_bytes

    def _train_client(self, cid: int, round_index: int, epochs: int | None = None) -> ClientRoundTraining:
        """Train one client (`epochs`: default the run's local epochs): its mean training loss
        and the seconds of model and data work."""
        batches, client = self.client_data(cid, round_index)
        self.method.set_client(client)
        epochs = self.settings.local_epochs if epochs is None else epochs
        try:
            trained = self._loop.fit(self.method, batches, epochs, client.class_names)
        except NonFiniteLoss as bad:
            # Past a non-finite loss every later number of the run is meaningless (NaN losses,
            # metrics at chance) yet would look like a result.
            raise divergence(self.method, str(bad), round_index, cid, bad.step, bad.lr) from bad
        finally:
            self.method.set_client(None)
        return trained

    def _shared_views(self) -> tuple | None:
        """What `ClientTrainSet.batch` needs to hand a frozen-image-tower method the features of
        augmented batches computed once per process: None where it has no say -- features are
        cached already (no augmentation), the method's image tower trains or is prompted, or
        workers collate the images (their batches are encoded in the step, as before)."""
        method, s = self.method, self.settings
        if self.view_features is None or not s.share_views or not method.frozen_image_features:
            return None
        if isinstance(self.train_images, torch.Tensor):
            return None
        if isinstance(self.train_images, LabeledImages) and s.num_workers > 0:
            return None
        device = method.device
        mixed = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(s.precision)
        backend = "device" if isinstance(self.train_images, DeviceImages) else "pil"
        # Everything that computes a view's features (tests/federation/test_cache_keys.py):
        # the weights, what the method reads of the tower (pooled or patch features), the
        # images and their transform, the augmentation backend, the autocast of the run's
        # precision, and `computing_key` (device, TF32, compiled blocks, shortcuts). The
        # views themselves (seed, epoch, position, image) complete it in `ClientTrainSet.batch`.
        prefix = (
            method.backbone.key,
            method.image_feature_kind,
            self.train_images.cache_key,
            backend,
            str(mixed),
            computing_key(device),
        )

        @torch.no_grad()
        def encode(images: torch.Tensor) -> torch.Tensor:
            images = images.to(device, non_blocking=True)
            # The FLOPs of a batch are a function of its shape: counted for the first batch of
            # each shape, charged at that count for the rest, which then run outside the
            # counting mode (compiled blocks run compiled there).
            kind = ("views", method.image_feature_kind, flops.shapes(images), str(mixed))
            # the autocast of the training step (Lightning's for the run's precision)
            with torch.autocast(device.type, dtype=mixed or torch.float32, enabled=mixed is not None):
                with flops.charge_kind("features", kind):  # shared by the methods, like the frozen features
                    return method.encode_images(images)

        return self.view_features, prefix, encode

    def _schedule_stream(self, first_round: int) -> ScheduleStream | None:
        """One loader over the rounds from `first_round` on, where worker processes decode PIL
        images (`loading.py`); None where batches come otherwise: cached features or device
        images (nothing to decode in workers), no workers, batched training (it takes the
        clients' batches interleaved), a central run's stream of steps."""
        s = self.settings
        if not (s.schedule_loader and s.num_workers > 0 and isinstance(self.train_images, LabeledImages)):
            return None
        if self._together is not None or self.epoch_steps is not None:
            return None
        plan, sizes = [], {}
        for round_index, sampled in enumerate(self.schedule):
            if round_index < first_round:
                continue
            for cid in sampled:
                shard, seed = self.clients[cid], self._seeds[round_index, cid]
                sampler = EpochTaggedSampler(len(shard.train_indices), seed)
                epochs = [[position for _, position in sampler] for _ in range(s.local_epochs)]
                plan.append((round_index, cid, epochs))
                sizes[round_index, cid] = min(s.batch_size, max(1, shard.num_samples))
        make_set = ClientSets(self.train_images, self.train_labels, self.clients, self._seeds)
        return ScheduleStream(make_set, plan, sizes, s.num_workers, pin_memory=s.accelerator == "gpu")

    def client_data(self, cid: int, round_index: int) -> tuple[ClientBatches, ClientContext]:
        """Client `cid`'s batches and context in round `round_index`, torch seeded for its
        local training: what any loop that trains the client-round starts from."""
        shard = self.clients[cid]
        s = self.settings
        seed = self._seeds[round_index, cid]
        seed_torch(seed)
        dataset = ClientTrainSet(self.train_images, self.train_labels, shard, seed)
        dataset.shared = self._shared_views()
        batch_size = min(s.batch_size, max(1, shard.num_samples))
        if self.epoch_steps is not None and round_index < len(self.epoch_steps):  # central: the federation's steps
            batches = StreamBatches(dataset, batch_size, seed, self.epoch_steps[round_index])
        elif self._stream is not None and self._stream.planned(round_index, cid):  # the run's one loader
            batches = self._stream.batches(round_index, cid)
        else:
            batches = ClientBatches(dataset, batch_size, seed, s.num_workers)
        client = ClientContext(
            cid,
            round_index + 1,
            tuple(self.class_names[c] for c in shard.train_classes),
            shard.num_samples,
            len(self.schedule),
            self.participations(cid, round_index),
            shard.domain,
        )
        return batches, client

    def participations(self, cid: int, round_index: int) -> int:
        """Rounds client `cid` trained in before round `round_index` (0-based) of the schedule."""
        if (round_index, cid) in self._participations:
            return self._participations[round_index, cid]
        return sum(cid in sampled for sampled in self.schedule[:round_index])


def _progress(total: int, unit: str, enabled: bool, initial: int = 0, desc: str = ""):
    return progress_bar(total=total, desc=desc, unit=unit, enabled=enabled, initial=initial, leave=False)
