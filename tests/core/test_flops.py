"""FLOP accounting: the counter against hand counts, and a run's account."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from conftest import method_config, trained_built_in_methods
from torch import nn

from benchmark import flops


def test_a_linear_layer_costs_2_flops_per_multiply_add_forward_and_twice_that_backward():
    layer = nn.Linear(24, 40)
    x = torch.randn(5, 24, requires_grad=True)
    out, forward = flops.count_flops(layer, x)
    assert forward == 2 * 5 * 24 * 40
    _, backward = flops.count_flops(lambda: out.sum().backward())
    assert backward == 2 * forward  # gradient of the input and of the weight


def mha_hand_count(batch: int, length: int, width: int) -> int:
    projections = 2 * batch * length * width * (3 * width) + 2 * batch * length * width * width
    attention = 2 * batch * length * length * width + 2 * batch * length * length * width  # QK^T, then AV
    return projections + attention


@pytest.mark.parametrize("frozen", [True, False], ids=["fused-no-grad", "sdpa-with-grad"])
def test_self_attention_is_counted_on_both_of_torch_paths(frozen):
    # A frozen tower without gradients takes torch's fused _native_multi_head_attention,
    # a trained one the scaled-dot-product kernels: both are counted the same.
    attention = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    attention.requires_grad_(not frozen)
    x = torch.randn(3, 7, 16)
    _, counted = flops.count_flops(lambda: attention(x, x, x, need_weights=False))
    assert counted == mha_hand_count(3, 7, 16)


def test_attention_backward_counts_its_matrix_products():
    q, k, v = (torch.randn(2, 4, 9, 8, requires_grad=True) for _ in range(3))
    out, forward = flops.count_flops(torch.nn.functional.scaled_dot_product_attention, q, k, v)
    product = 2 * 2 * 4 * 9 * 9 * 8  # one [9, 8] x [8, 9]-sized product per (batch, head)
    assert forward == 2 * product  # QK^T and attention x V
    _, backward = flops.count_flops(lambda: out.sum().backward())
    assert backward == 5 * product  # QK^T recomputed, then the gradients of the attention, V, Q and K


def test_nested_counting_attributes_each_operation_once():
    layer = nn.Linear(8, 8)
    with flops.ledger() as account:
        with flops.charge("evaluation"):
            layer(torch.randn(2, 8))
            with flops.charge("features"):
                layer(torch.randn(3, 8))
    assert account.totals == {"evaluation": 2 * 2 * 64, "features": 2 * 3 * 64}


@pytest.mark.parametrize("sample", [True, False], ids=["sampled", "every"])
def test_code_of_a_kind_is_counted_once_and_charged_at_its_count_after(sample):
    layer = nn.Linear(8, 8)
    one = flops.count_flops(layer, torch.randn(2, 8))[1]
    with flops.ledger(sample_steps=sample) as account:
        counted = []
        for kind in ("a", "a", "b", None, None, "a"):
            with flops.charge_kind("evaluation", kind) as counts:
                layer(torch.randn(2, 8))
            counted.append(counts)
        with flops.charge("features"):  # inside an enclosing count: counted by it, once
            with flops.charge_kind("evaluation", "a") as counts:
                layer(torch.randn(2, 8))
            counted.append(counts)
    assert counted == ([True, False, True, True, True, False] if sample else [True] * 6) + [True]
    assert account.totals == {"evaluation": 7 * one}


def test_an_evaluation_batch_kind_names_shapes_not_values():
    from benchmark.backbone import ImagePrefix

    def kind_of(module, inputs, classes):  # as `accuracy` reads it: kinds for the classes, then a batch's
        return flops.evaluation_kinds(module, classes)(inputs)

    module = nn.Linear(2, 2)
    module.register_buffer("experts", torch.tensor([3]))
    with flops.ledger():
        kind = kind_of(module, ImagePrefix(torch.zeros(4, 5, 6), 2), (torch.ones(3, 6), ("cat", "dog")))
        assert kind == kind_of(module, ImagePrefix(torch.ones(4, 5, 6), 2), (torch.zeros(3, 6), ("cat", "dog")))
        assert kind != kind_of(module, ImagePrefix(torch.ones(4, 5, 6), 1), (torch.zeros(3, 6), ("cat", "dog")))
        assert kind != kind_of(module, ImagePrefix(torch.ones(4, 5, 6), 2), (torch.zeros(3, 6), ("cat", "cow")))
        module.experts.fill_(2)  # the discrete state: pFedMoAP's expert count changes a batch's work
        assert kind != kind_of(module, ImagePrefix(torch.zeros(4, 5, 6), 2), (torch.ones(3, 6), ("cat", "dog")))
        assert kind_of(module, torch.zeros(2), object()) is None  # unknown: counted
        assert kind_of(module, object(), torch.zeros(2)) is None
    assert kind_of(module, torch.zeros(2), torch.zeros(2)) is None  # no ledger open


# Exact sampling: PromptFL; pFedMoAP, whose step's work changes between rounds (the
# downloaded experts) and whose first step of a client-round encodes the experts, which
# later steps reuse; FedOTP, whose evaluation batches run a data-dependent number of
# (uncounted) Sinkhorn steps. Every other built-in method in the slow suite.
SAMPLED_EXACTLY = {"promptfl", "pfedmoap", "fedotp"}


@pytest.mark.parametrize(
    "method",
    [m if m in SAMPLED_EXACTLY else pytest.param(m, marks=pytest.mark.slow) for m in trained_built_in_methods()],
)
def test_a_run_accounts_its_flops_and_counting_changes_no_number(fake_data_root, tmp_path, monkeypatch, method):
    from benchmark.federation.features import FeatureCache
    from benchmark.runs import preparation
    from benchmark.runs.runner import run_experiment

    config = method_config(method, fake_data_root, tmp_path / "plain", local_epochs=2, rounds=3)
    # No ledger open: nothing is counted. This run also fills the process's caches of frozen
    # work (the backbone's fixed text prefixes), so the two counted runs below start alike.
    with monkeypatch.context() as patch:
        patch.setattr(flops, "ledger", lambda: _nothing())
        plain = run_experiment(config, progress=False)
    assert plain.timing["flops"]["total"] == 0

    monkeypatch.setattr(preparation, "SHARED_FEATURES", FeatureCache(progress=False))  # features computed by this run
    counted = run_experiment(dataclasses.replace(config, out=str(tmp_path / "counted")), progress=False)
    assert plain.summary["metrics"] == counted.summary["metrics"]  # counting changes no number
    assert plain.per_client == counted.per_client
    timing = json.loads((counted.run_dir / "timing.json").read_text())
    train = timing["flops"]["train"]
    assert train > 0 and train == sum(r.train_flops for r in counted.federation.rounds)
    assert timing["flops"]["evaluation"] > 0
    assert timing["flops"]["features"] > 0 or method not in SAMPLED_EXACTLY  # these three share image work
    assert timing["flops"]["total"] == train + timing["flops"]["evaluation"] + timing["flops"]["features"]
    assert "flops" not in json.loads((counted.run_dir / "summary.json").read_text())  # engine- and resume-free
    # Steps are sampled: fewer counted than run.
    assert 0 < timing["flops"]["train_steps_counted"] < timing["flops"]["train_steps"]

    # Count every step and evaluation batch. Evaluation batches of a kind cost the same for
    # every method; a training step too, but for the filling of a cache that outlives the
    # client-round (a text encoding), which the sample charges to every first step.
    sampled_ledger = flops.ledger
    monkeypatch.setattr(flops, "ledger", lambda: sampled_ledger(sample_steps=False))
    every = run_experiment(dataclasses.replace(config, out=str(tmp_path / "every")), progress=False)
    assert every.timing["flops"]["train_steps_counted"] == every.timing["flops"]["train_steps"]
    assert every.timing["flops"]["evaluation"] == timing["flops"]["evaluation"]
    if method in SAMPLED_EXACTLY:
        assert every.timing["flops"]["train"] == train
    else:
        assert every.timing["flops"]["train"] <= train


def _nothing():
    import contextlib

    @contextlib.contextmanager
    def unopened():
        yield flops.FlopLedger()

    return unopened()
