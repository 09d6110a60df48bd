"""FedCLIP: the adapter's count on ViT-B/16, the forward against the paper's formula on
the raw image feature, the cache kind that keeps it raw, and what learns."""

from __future__ import annotations

import math

import clip_reference as ref
import pytest
import torch
import torch.nn.functional as F
from conftest import run_tiny_cell

from benchmark.backbone import load_backbone
from benchmark.registry import build_method

NAMES = ["texture_a", "texture_b", "texture_c"]


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_count_on_vit_b16(vit_b16):
    method = build_method("fedclip", vit_b16)
    assert 2 * (512 * 512 + 512) == 525_312
    assert method.parameter_counts() == {"trainable_params": 525_312, "uploaded_params": 525_312}


def test_forward_matches_the_formula_on_the_raw_feature(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedclip", tiny_backbone).eval()
    model, state = tiny_backbone.model, method.state_dict()
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        got = method.logits(images, NAMES)
        f = ref.image_features(model, images)  # raw, not normalized
        attention = torch.softmax(
            torch.tanh(f @ state["adapter.0.weight"].T + state["adapter.0.bias"]) @ state["adapter.2.weight"].T
            + state["adapter.2.bias"],
            dim=-1,
        )
        text = ref.normalize(ref.text_features(model, ref.tokenize([f"a photo of a {n}." for n in NAMES])))
        expected = tiny_backbone.logit_scale * ref.normalize(attention * f) @ text.T
        on_normalized = method.classify(ref.normalize(f), method.encode_classes(NAMES))
    assert got.shape == (5, 3)
    torch.testing.assert_close(attention.sum(-1), torch.ones(5))  # a softmax over the feature dimensions
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    # The adapter is not scale-invariant: fed the normalized feature it would give other logits,
    # which is why FedCLIP caches the raw feature under a kind of its own.
    assert not torch.allclose(on_normalized, got, atol=1e-3)
    assert method.frozen_image_features and method.image_feature_kind != "clip"


def test_only_the_adapter_learns(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedclip", tiny_backbone).train()
    loss = F.cross_entropy(method.logits(torch.randn(4, 3, 32, 32), NAMES), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    expected = {"adapter.0.weight", "adapter.0.bias", "adapter.2.weight", "adapter.2.bias"}
    ref.grads_only_in(method, expected)
    assert set(method.uploaded_state()) == set(method.client_state()) == expected


def test_runs_end_to_end(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "fedclip", fake_data_root, tmp_path)
    dim = load_backbone(ref.TINY, None).embed_dim
    assert summary["bytes_up_total"] == 2 * 2 * 2 * (dim * dim + dim) * 4
    assert summary["train_features_cached"] is True
    assert all(math.isfinite(v) for v in summary["metrics"].values())
