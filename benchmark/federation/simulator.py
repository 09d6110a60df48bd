"""The federated simulator: rounds x sampled clients x local epochs, one resident module.

The rounds are a loop object with its own state (`benchmark.federation.round_loop.RoundLoop`:
the round counter, the clients' states, the server's, the RNG states; a round checkpoint is
its `state_dict()`); the simulator is what it runs them with. Each round: every sampled
client gets its own state swapped into the one resident method module, receives the
server's download, trains (`benchmark.federation.client_loop`: the module's Lightning hooks
with a fresh optimizer and scheduler, so nothing leaks from the previous client; its
batches: `benchmark.federation.client_batches`), and uploads. The server (`benchmark.federation.server.Server`, the one
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

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from benchmark import flops
from benchmark.backbone import computing_key
from benchmark.config import SAMPLING_RULES
from benchmark.federation.batched_training import BatchedTraining, BatchingRefused, ClientDiverged, probe
from benchmark.federation.client_batches import (
    ClientBatches,
    ClientSets,
    ClientTrainSet,
    EpochTaggedSampler,
    StreamBatches,
)
from benchmark.federation.client_loop import ClientLoop, ClientRoundTraining, NonFiniteLoss
from benchmark.federation.features import ViewFeatures
from benchmark.federation.loading import ScheduleStream
from benchmark.federation.round_loop import ClientRound, FederationResult, RoundHooks, RoundLoop
from benchmark.federation.server import Server, check_finite, divergence
from benchmark.federation.servers.fedavg import FedAvgServer
from benchmark.federation.stacked import BatchingProbe
from benchmark.method import ClientContext, FederatedMethod, State, state_bytes
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


def schedule_seeds(schedule: list[list[int]], seed: int) -> dict[tuple[int, int], int]:
    """Every client-round's seed, (round index, client id) -> seed, drawn up front: numpy's
    SeedSequence costs ~100 us when it runs between training steps (their compute evicts its
    code and data from the caches), ~7 us in a row."""
    return {
        (round_index, cid): client_seed(seed, round_index, cid)
        for round_index, sampled in enumerate(schedule)
        for cid in sampled
    }


def schedule_participations(schedule: list[list[int]]) -> dict[tuple[int, int], int]:
    """How many rounds each client trained in before each of its rounds, (round index, client
    id) -> count: a function of the fixed schedule, so a Flower node knows it without keeping count."""
    participations, counts = {}, {}
    for round_index, sampled in enumerate(schedule):
        for cid in sampled:
            participations[round_index, cid] = counts.get(cid, 0)
            counts[cid] = counts.get(cid, 0) + 1
    return participations


def seed_torch(seed: int) -> None:
    """`torch.manual_seed` for the devices a run uses: the CPU and, once a run has put its
    model there, CUDA. Cheaper per client-round than torch.manual_seed, which queues a lazy
    seeding (with a captured stack trace) for every backend not in use, and than
    `torch.cuda.is_available()`, which retries the driver on a machine without one (~0.4 ms)."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


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
        progress: bool = True,
        hooks: RoundHooks | None = None,
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
        self.seed = seed
        self.settings = settings
        self.progress = progress
        self.hooks = hooks  # what the run is told as the rounds go (the round loop calls them)
        self._seeds, self._participations = schedule_seeds(schedule, seed), schedule_participations(schedule)
        self.server = self._server()  # a fresh one for every `run`
        self.loop: RoundLoop | None = None  # the rounds of the last `run`
        self._client_loop = ClientLoop(settings.accelerator, settings.precision, settings.optimizer_state == "shared")
        self._stream: ScheduleStream | None = None  # the run's one loader, where it has one
        self._batching = BatchingProbe(method, "train one by one")
        self._together = self._batched_training()

    def _batched_training(self) -> BatchedTraining | None:
        """The batched trainer of a round's clients where the run asks for it and the method allows it."""
        method, settings = self.method, self.settings
        if not (settings.batched_training and method.trains):
            return None
        if settings.optimizer_state == "shared":  # one optimizer stepped client after client has no batched equivalent
            self._batching.refuse("optimizer_state = shared steps one optimizer client after client")
            return None
        try:
            return BatchedTraining(method, self._client_loop)
        except BatchingRefused as refused:
            self._batching.refuse(str(refused))
            return None

    def run(self, resume: dict | None = None) -> FederationResult:
        """Run the rounds of the schedule, or those after `resume`'s (a round checkpoint: the
        round loop's `state_dict()`)."""
        method = self.method
        initial = method.client_state()
        # Every client starts from the same initial state (the method built with the run seed).
        states: dict[int, State] = {cid: {k: v.clone() for k, v in initial.items()} for cid in self.clients}
        self.server = self._server()
        name = getattr(method, "name", type(method).__name__)
        loop = self.loop = RoundLoop(self.schedule, self.server, self, states, self.hooks, self.progress, name)
        if not method.trains:  # nothing changes between rounds: the same state is evaluated
            for round_number in loop.evaluated_rounds:
                if loop.hooks.on_states:
                    loop.hooks.on_states(round_number, states)
            return FederationResult(states)
        if resume is not None:
            loop.load_state_dict(resume)
        self._stream = self._schedule_stream(loop.next_round)
        try:
            result = loop.run()
        finally:
            self._client_loop.release(method)  # the module leaves the Fabric it trained under
            if self._stream is not None:
                self._stream.close()  # its workers end with the run
                self._stream = None
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
            self._client_loop.release(method)
        return tuned, losses

    def train_round(
        self, sampled: Sequence[int], round_index: int, states: dict[int, State], received: dict[int, State | None]
    ) -> dict[int, ClientRound]:
        """The local training of round `round_index`'s clients: in one batched pass where the
        run asks for it and the method allows it (`batched_training.py`), else one by one."""
        if self._together is not None and len(sampled) > 1:
            together = self._train_together(sampled, round_index, states, received)
            if together is not None:
                return together
        return {cid: self.client_round(cid, round_index, states[cid], received[cid]) for cid in sampled}

    def _train_together(self, sampled, round_index, states, received) -> dict[int, ClientRound] | None:
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

    def client_round(self, cid: int, round_index: int, state: State, received: State | None) -> ClientRound:
        """One client's part of a round, wherever it runs (this simulator, or a Flower
        ClientApp on the client's own node): its `state`, then the server's download
        `received` (None in round 1) loaded into the resident module, local training, and
        the state and upload it leaves."""
        method = self.method
        method.load_client_state(state if received is None else {**state, **received})  # the download wins
        training = self._train_client(cid, round_index)
        return self._client_round(cid, round_index, method.client_state(), training)

    def _client_round(self, cid: int, round_index: int, trained: State, training: ClientRoundTraining) -> ClientRound:
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
            trained = self._client_loop.fit(self.method, batches, epochs, client.class_names)
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
