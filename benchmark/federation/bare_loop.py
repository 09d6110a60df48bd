"""The shortest loop that computes a federation's client-rounds: the reference that
`fedbench bench` measures the framework against.

It trains the same clients on the same batches with the same seeds, optimizer and
schedule as `FederatedSimulator` (its final client states are equal, bit for bit:
`tests/sweeps/test_perf.py`), with the same server (the simulator's kind of `benchmark.federation.server.Server`: the
download, the aggregation, the bank and the aggregate's finiteness check, the one
per-round check it keeps), and leaves out everything the framework adds around that: the
Lightning hooks, the loss and client-state checks, the FLOP ledger, progress, round logs,
the round loop's checkpointed state, byte counts and timing of its own. What a client-round costs here beyond the
model's steps, the data and `configure_optimizers` is what any loop pays (seeding,
loading and copying out the client's state, stepping the scheduler, cold caches after
the model's step); the simulator's excess over it is the framework's own cost.

Automatic optimization only, with `configure_optimizers` returning an optimizer, or an
optimizer with one step-interval scheduler (the recipes of PromptFL and most methods).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from benchmark.federation.client_loop import LocalTrainingFabric, optimization_step
from benchmark.federation.configured_optimizers import read_configured
from benchmark.federation.simulator import FederatedSimulator
from benchmark.method import State


@dataclass
class BareRun:
    client_states: dict[int, State]
    client_rounds: int
    total_seconds: float  # the rounds, aggregation included (as a round log's total)
    model_seconds: float  # training_step, zero_grad, backward, optimizer step
    data_seconds: float
    optimizer_seconds: float  # the method's configure_optimizers

    @property
    def rest_seconds(self) -> float:
        return self.total_seconds - self.model_seconds - self.data_seconds - self.optimizer_seconds


def run_bare(simulator: FederatedSimulator) -> BareRun:
    """The client-rounds of `simulator`'s schedule (its method, data and settings), by a bare loop."""
    method, s = simulator.method, simulator.settings
    if not method.automatic_optimization:
        raise ValueError(f"the bare loop runs automatic optimization only; {method.name!r} steps its own optimizers")
    fabric = LocalTrainingFabric(s.accelerator, s.precision)
    if fabric.scales_gradients:
        raise ValueError(f"the bare loop has no gradient scaler; precision {s.precision!r} needs one")
    initial = method.client_state()
    states = {cid: {k: v.clone() for k, v in initial.items()} for cid in simulator.clients}
    server = simulator.server_kind(method, list(simulator.clients.values()), s.aggregation)
    total = model = data = optimizer_setup = 0.0
    client_rounds = 0
    method.fabric = fabric  # what configure_optimizers reads as self.trainer, and self.log writes to
    method.train()
    try:
        for r, sampled in enumerate(simulator.schedule):
            start_round = time.perf_counter()
            uploads = []
            for cid in sampled:
                received = server.download(cid, r) or {}
                method.load_client_state({**states[cid], **received})
                batches, client = simulator.client_data(cid, r)
                method.set_client(client)
                fabric.max_epochs, fabric.num_training_batches, fabric.global_step = s.local_epochs, len(batches), 0
                t = time.perf_counter()
                optimizer, scheduler = _optimizer_and_scheduler(method, method.configure_optimizers())
                optimizer_setup += time.perf_counter() - t
                for epoch in range(s.local_epochs):
                    fabric.current_epoch = epoch
                    batches.sampler.set_epoch(epoch)
                    iterator = iter(batches)
                    while True:
                        t = time.perf_counter()
                        batch = next(iterator, None)
                        data += time.perf_counter() - t
                        if batch is None:
                            break
                        fabric.batch_images = len(batch[-1])
                        t = time.perf_counter()
                        with fabric.autocast():
                            loss = method.training_step(batch, 0)
                        optimization_step(loss, optimizer, torch.Tensor.backward)  # the client loop's update
                        del loss
                        model += time.perf_counter() - t
                        fabric.global_step += 1
                        if scheduler is not None:
                            scheduler.step()
                states[cid] = method.client_state()
                uploads.append((cid, method.upload_of(states[cid])))
                client_rounds += 1
            server.receive(r, uploads)
            total += time.perf_counter() - start_round
    finally:
        method.fabric = None
        method.set_client(None)
    return BareRun(states, client_rounds, total, model, data, optimizer_setup)


def _optimizer_and_scheduler(method, configured) -> tuple[torch.optim.Optimizer, object | None]:
    """The optimizer and its step-interval scheduler, read as the client loop reads them."""
    optimizers, schedulers = read_configured(configured, True, f"{method.name}.configure_optimizers")
    if len(optimizers) == 1 and not schedulers:
        return optimizers[0], None
    if (
        len(optimizers) == 1
        and len(schedulers) == 1
        and schedulers[0].interval == "step"
        and schedulers[0].frequency == 1
    ):
        return optimizers[0], schedulers[0].scheduler
    raise ValueError(
        f"the bare loop reads an optimizer, or an optimizer with one step-interval scheduler; "
        f"{method.name}.configure_optimizers returned another form"
    )
