"""Frozen features of augmented views shared across methods (`features.ViewFeatures`): a view
depends on (dataset, seed, round, client, epoch, image), never on the method, so methods whose
image tower is frozen and unprompted take one image-tower pass per batch of views between them,
and train exactly as if each had encoded its own."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import tiny_config

from benchmark import shortcuts
from benchmark.federation.features import ViewFeatures
from benchmark.runs import preparation


def train(config, share: bool, views: ViewFeatures, monkeypatch):
    monkeypatch.setattr(preparation, "SHARED_VIEWS", views)
    with shortcuts.use(config.shortcuts):
        run = preparation.prepare_run(config, progress=False)
        run.settings = dataclasses.replace(run.settings, share_views=share)
        return run.simulator().run()


def assert_same_training(a, b):
    assert [r.train_loss for r in a.rounds] == [r.train_loss for r in b.rounds]
    for cid, state in a.client_states.items():
        for key, value in state.items():
            assert torch.equal(value, b.client_states[cid][key]), (cid, key)


@pytest.mark.parametrize("backend", ["pil", pytest.param("device", marks=pytest.mark.slow)])
def test_methods_share_one_image_tower_pass_per_batch_of_views_exactly(tmp_path, fake_data_root, monkeypatch, backend):
    def config(method):
        return tiny_config(
            fake_data_root, tmp_path, method=method, augment=True, augment_backend=backend, local_epochs=2
        )

    views = ViewFeatures()
    promptfl = train(config("promptfl"), True, views, monkeypatch)
    batches = views.misses
    assert batches > 0 and views.hits == 0  # every batch of views encoded once
    adapter = train(config("clip_adapter"), True, views, monkeypatch)
    assert views.misses == batches and views.hits == batches  # the second method encoded nothing
    # The same training as each method encoding its own views in its steps.
    assert_same_training(promptfl, train(config("promptfl"), False, ViewFeatures(), monkeypatch))
    assert_same_training(adapter, train(config("clip_adapter"), False, ViewFeatures(), monkeypatch))


def test_a_method_whose_image_tower_trains_does_not_share(tmp_path, fake_data_root, monkeypatch):
    views = ViewFeatures()
    train(tiny_config(fake_data_root, tmp_path, method="pfedmma", augment=True), True, views, monkeypatch)
    assert views.hits == views.misses == 0


def test_the_oldest_batches_leave_first_past_the_budget():
    views = ViewFeatures(max_bytes=3 * 4 * 4)  # three batches of 4 floats
    for key in range(4):
        views.batch(key, lambda: torch.zeros(4))
    views.batch(0, lambda: torch.zeros(4))  # evicted: computed again
    views.batch(3, lambda: torch.zeros(4))  # kept
    assert (views.misses, views.hits) == (5, 1)


def test_view_batches_are_counted_once_per_shape_and_charged_the_same_flops(tmp_path, fake_data_root, monkeypatch):
    # Counting runs the encoder under a Python dispatch mode (compiled blocks would run
    # uncompiled): only the first batch of each shape is counted, the rest are charged its
    # count -- the same total as counting every batch.
    from benchmark import flops

    counted = []
    counting = flops.FlopLedger.counting

    def recorded(self, part):
        counted.append(part)
        return counting(self, part)

    monkeypatch.setattr(flops.FlopLedger, "counting", recorded)
    config = tiny_config(fake_data_root, tmp_path, method="promptfl", augment=True, local_epochs=2)
    totals, counts = {}, {}
    for sample in (True, False):
        views, counted[:] = ViewFeatures(), []
        with flops.ledger(sample_steps=sample) as account:
            train(config, True, views, monkeypatch)
        totals[sample], counts[sample] = account.totals["features"], counted.count("features")
    assert totals[True] == totals[False] > 0
    # every batch of views counted when sampling is off; one per shape (2 here) when on
    assert counts[False] > counts[True] and counts[True] <= 2 + 1  # + the test images' features


def sweep_hits(tmp_path, fake_data_root, monkeypatch, views: ViewFeatures) -> dict[str, tuple[int, int]]:
    """(hits, misses) of each method of a sweep's order that reads view features."""
    seen = {}
    for method in ("promptfl", "fedotp", "fedpgp"):
        hits, misses = views.hits, views.misses
        train(tiny_config(fake_data_root, tmp_path, method=method, augment=True), True, views, monkeypatch)
        seen[method] = (views.hits - hits, views.misses - misses)
    return seen


def test_fedotps_patch_features_do_not_push_out_the_pooled_features_the_next_method_reads(
    tmp_path, fake_data_root, monkeypatch
):
    # A budget that holds PromptFL's pooled features and not FedOTP's patch features (16 times
    # larger on the tiny CLIP, which has 16 patches): in a sweep's order FedPGP, after FedOTP, still reads every batch
    # PromptFL encoded. In one pool FedOTP's batches would have pushed them out.
    probe = ViewFeatures()
    train(tiny_config(fake_data_root, tmp_path, method="promptfl", augment=True), True, probe, monkeypatch)
    budget = 3 * sum(probe._used.values())  # a batch of patch features fits, and evicts in one pool
    pooled = sweep_hits(tmp_path, fake_data_root, monkeypatch, ViewFeatures(max_bytes=budget))
    assert pooled["fedotp"][0] == 0 and pooled["fedpgp"] == (pooled["promptfl"][1], 0)

    one_pool = ViewFeatures(max_bytes=budget)
    batch = one_pool.batch
    monkeypatch.setattr(one_pool, "batch", lambda key, compute, pool=None: batch(key, compute))
    flooded = sweep_hits(tmp_path, fake_data_root, monkeypatch, one_pool)
    assert flooded["fedpgp"][0] < pooled["fedpgp"][0]  # the case this guards against
    print(f"view-feature hits (hits, misses): pools {pooled}; one pool {flooded}")
