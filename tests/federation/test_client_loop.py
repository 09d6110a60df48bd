"""The client loop trains exactly as a Lightning Trainer per client-round did, bit for bit.

The reference below is the simulator's former local training: a fresh `lightning.Trainer`
per client-round over a DataLoader, the loss read from `callback_metrics`. Every method
is run through a whole federation both ways and compared: every client's final state
(torch.equal), every round's training losses, and the metrics.
"""

from __future__ import annotations

import dataclasses
import warnings

import lightning as L
import pytest
import torch
from conftest import method_config, tiny_config, trained_built_in_methods
from torch.utils.data import DataLoader

from benchmark.federation import simulator as federation
from benchmark.federation.client_loop import ClientRoundTraining
from benchmark.method import ClientContext
from benchmark.registry import MethodError, check_method_class, register_method
from methods.promptfl import PromptFL

TRAINED = trained_built_in_methods()
# Automatic SGD + cosine with warm-up (promptfl), AdamW over estimated_stepping_batches
# (lora), manual optimization with on_train_start/end and num_training_batches (fedmvp),
# per-round frozen inputs (pfedmoap): the fast suite; every other method is slow.
FAST = {"promptfl", "lora", "fedmvp", "pfedmoap"}


def trainer_train_client(self, cid: int, round_index: int) -> ClientRoundTraining:
    """The reference: `FederatedSimulator._train_client` with a Lightning Trainer."""
    shard, s = self.clients[cid], self.settings
    seed = federation.client_seed(self.seed, round_index, cid)
    torch.manual_seed(seed)
    dataset = federation.ClientTrainSet(self.train_images, self.train_labels, shard, seed)
    loader = DataLoader(
        dataset,
        batch_size=min(s.batch_size, max(1, shard.num_samples)),
        sampler=federation.EpochTaggedSampler(len(dataset), seed),
        generator=torch.Generator().manual_seed(seed),
        num_workers=s.num_workers,
    )
    self.method.train()
    names = tuple(self.class_names[c] for c in shard.train_classes)
    context = ClientContext(
        cid, round_index + 1, names, shard.num_samples, len(self.schedule), self.participations(cid, round_index)
    )
    self.method.set_client(context)
    trainer = L.Trainer(
        accelerator=s.accelerator,
        devices=1,
        precision=s.precision,
        max_epochs=s.local_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(self.method, train_dataloaders=loader)
    self.method.set_client(None)
    loss = trainer.callback_metrics.get("train_loss")
    return ClientRoundTraining(float(loss) if loss is not None else float("nan"), 0.0, 0.0, 0.0)


def run_both(config, monkeypatch):
    from benchmark.runs.runner import run_experiment

    loop = run_experiment(config, write=False, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(federation.FederatedSimulator, "_train_client", trainer_train_client)
        trainer = run_experiment(dataclasses.replace(config), write=False, progress=False)
    return loop, trainer


def assert_same_training(loop, trainer) -> None:
    states, reference = loop.federation.client_states, trainer.federation.client_states
    assert states.keys() == reference.keys()
    for cid in states:
        for key, value in states[cid].items():
            assert torch.equal(value, reference[cid][key]), f"client {cid}: {key} differs"
    assert [r.train_loss for r in loop.federation.rounds] == [r.train_loss for r in trainer.federation.rounds]
    assert loop.summary["metrics"] == trainer.summary["metrics"]
    assert loop.per_client == trainer.per_client


@pytest.mark.parametrize("method", [m if m in FAST else pytest.param(m, marks=pytest.mark.slow) for m in TRAINED])
def test_every_method_trains_as_under_a_lightning_trainer(method, fake_data_root, tmp_path, monkeypatch):
    # 2 local epochs of 3 batches (the cosine schedule and the epoch boundaries matter),
    # 2 rounds (downloads, FedMVP's per-participation lr and LoRA switch), augmented images.
    config = method_config(method, fake_data_root, tmp_path, rounds=2, local_epochs=2, batch_size=3, augment=True)
    loop, trainer = run_both(config, monkeypatch)
    assert all(loss == loss for r in loop.federation.rounds for loss in r.train_loss.values())  # logged, not nan
    assert_same_training(loop, trainer)


def test_cached_features_and_bf16_autocast_train_as_under_a_lightning_trainer(fake_data_root, tmp_path, monkeypatch):
    # Without augmentation PromptFL trains on cached frozen features (gathered in one
    # indexing, not collated per item); bf16-mixed runs the steps under CPU autocast.
    config = tiny_config(
        fake_data_root, tmp_path, method="promptfl", rounds=2, local_epochs=2, batch_size=3, precision="bf16-mixed"
    )
    loop, trainer = run_both(config, monkeypatch)
    assert isinstance(loop.summary, dict)
    assert_same_training(loop, trainer)


@register_method("test_skips_and_halves")
class SkipsAndHalves(PromptFL):
    """Ends every epoch after its first batch (`on_train_batch_start` returns -1) and halves
    the lr per epoch with an epoch-interval scheduler: the schedule must step as the
    Trainer steps it when an epoch is cut short."""

    def on_train_batch_start(self, batch, batch_idx):
        return -1 if batch_idx == 1 else None

    def configure_optimizers(self):
        optimizer = torch.optim.SGD([self.ctx], lr=self.hparams.lr, momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


def test_an_epoch_cut_short_by_its_hook_trains_as_under_a_lightning_trainer(fake_data_root, tmp_path, monkeypatch):
    config = tiny_config(
        fake_data_root,
        tmp_path,
        method="test_skips_and_halves",
        rounds=1,
        local_epochs=3,
        batch_size=2,
        method_args={"lr": 0.5},
    )
    loop, trainer = run_both(config, monkeypatch)
    assert_same_training(loop, trainer)


BATCH_OUTPUTS: list = []  # what on_train_batch_end received, by the plugins below


def _record(outputs) -> None:
    BATCH_OUTPUTS.append(
        {
            k: (v.item(), v.grad_fn is None, v.requires_grad) if isinstance(v, torch.Tensor) else v
            for k, v in outputs.items()
        }
    )


@register_method("test_dict_output")
class DictOutput(PromptFL):
    """Returns a dict with an extra entry and records what on_train_batch_end receives."""

    def training_step(self, batch, batch_idx):
        return {"loss": super().training_step(batch, batch_idx), "batch": batch_idx}

    def on_train_batch_end(self, outputs, batch, batch_idx):
        _record(outputs)


@register_method("test_manual_output")
class ManualOutput(PromptFL):
    """Manual optimization returning its loss tensor; records on_train_batch_end's outputs."""

    automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD([self.ctx], lr=self.hparams.lr)

    def on_train_batch_end(self, outputs, batch, batch_idx):
        _record(outputs)


@pytest.mark.parametrize("method", ["test_dict_output", "test_manual_output"])
def test_on_train_batch_end_receives_what_a_lightning_trainer_hands_it(method, fake_data_root, tmp_path, monkeypatch):
    # Automatic: {"loss": a detached copy, **the other entries}; manual: the loss detached.
    config = tiny_config(fake_data_root, tmp_path, method=method, rounds=1, local_epochs=2, batch_size=3)
    BATCH_OUTPUTS.clear()
    from benchmark.runs.runner import run_experiment

    loop = run_experiment(config, write=False, progress=False)
    seen = list(BATCH_OUTPUTS)
    BATCH_OUTPUTS.clear()
    with monkeypatch.context() as patch:
        patch.setattr(federation.FederatedSimulator, "_train_client", trainer_train_client)
        trainer = run_experiment(dataclasses.replace(config), write=False, progress=False)
    assert seen and seen == BATCH_OUTPUTS
    assert all(entry["loss"][1:] == (True, False) for entry in seen)  # detached
    assert_same_training(loop, trainer)


def test_a_method_overriding_a_hook_the_loop_does_not_call_is_refused():
    class ClipsGradients(PromptFL):
        def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
            pass

    with pytest.raises(MethodError, match=r"overrides configure_gradient_clipping.*does not call"):
        check_method_class(ClipsGradients, "clips")


def test_a_round_times_the_model_and_the_data_apart_within_its_total(fake_data_root, tmp_path):
    from benchmark.cli.commands.profile import format_profile
    from benchmark.runs.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=2, batch_size=3, augment=True)
    result = run_experiment(config, write=False, progress=False)
    for log in result.federation.rounds:
        assert log.model_seconds > 0 and log.data_seconds > 0 and log.optimizer_seconds > 0  # images: decoded
        assert log.model_seconds + log.data_seconds + log.optimizer_seconds < log.total_seconds
    report = format_profile(result)
    for part in ("model compute:", "data loading:", "optimizer setup:", "framework:"):
        assert part in report


@register_method("test_two_optimizers")
class TwoOptimizers(PromptFL):
    """Two optimizers under automatic optimization: a Trainer refuses it, so must the loop."""

    def configure_optimizers(self):
        return torch.optim.SGD([self.ctx], lr=0.1), torch.optim.SGD([self.ctx], lr=0.2)


def test_several_optimizers_under_automatic_optimization_are_refused_as_a_trainer_refuses_them(
    fake_data_root, tmp_path, monkeypatch
):
    from benchmark.runs.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method="test_two_optimizers", rounds=1, local_epochs=1, batch_size=2)
    with pytest.raises(RuntimeError, match=r"returned 2 optimizers; automatic optimization takes one"):
        run_experiment(config, write=False, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(federation.FederatedSimulator, "_train_client", trainer_train_client)
        with pytest.raises(RuntimeError, match=r"multiple optimizers is only supported with manual optimization"):
            run_experiment(dataclasses.replace(config), write=False, progress=False)


STEP_LRS: dict[tuple[int, int], list[float]] = {}  # (round, client) -> the lr of each step, by the plugin below


@register_method("test_records_step_lrs")
class RecordsStepLrs(PromptFL):
    """PromptFL (CoOp's warm-up epoch at 1e-5, then cosine) recording the lr each step uses."""

    def on_train_batch_start(self, batch, batch_idx):
        client = self.client
        STEP_LRS.setdefault((client.round, client.client_id), []).append(self.optimizers().param_groups[0]["lr"])


def test_the_logged_lr_is_the_mean_lr_of_the_round_s_steps_not_the_warm_up_s(fake_data_root, tmp_path):
    """Issue 60: W&B's `lr/mean` (and metrics.csv's `lr`) showed the warm-up's first value,
    1e-5, every round: the lr before the first step of a schedule restarted each client-round.
    (Clients trained together report the same: tests/federation/test_batched_training.py.)"""
    from benchmark.runs.runner import run_experiment

    STEP_LRS.clear()
    config = tiny_config(
        fake_data_root, tmp_path, method="test_records_step_lrs", rounds=2, local_epochs=2, batch_size=2
    )
    run = run_experiment(config, write=False, progress=False)
    logged = {(log.round, cid): lr for log in run.federation.rounds for cid, lr in log.lr.items()}
    assert logged.keys() == STEP_LRS.keys() and len(logged) == 6
    for key, rates in STEP_LRS.items():
        assert len(set(rates)) > 2  # the warm-up, then a cosine
        assert logged[key] == pytest.approx(sum(rates) / len(rates), rel=1e-12), key
        assert logged[key] > 1e-4  # not the warm-up's 1e-5
