"""CLIP-Adapter: the residual blend, caching exactness, global vs personalized state, counts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark.backbone import load_backbone
from benchmark.registry import build_method
from benchmark.runs.runner import run_experiment

NAMES = ("texture_a", "texture_b", "texture_c")


def hand_logits(features: np.ndarray, w1: np.ndarray, w2: np.ndarray, text: np.ndarray, ratio: float, scale: float):
    """f' = ratio * relu(W2 relu(W1 f)) + (1 - ratio) * f, normalized, times the text features."""
    out = []
    for f in features:
        hidden = np.maximum(w1 @ f, 0.0)
        adapted = np.maximum(w2 @ hidden, 0.0)
        blended = ratio * adapted + (1 - ratio) * f
        blended = blended / np.linalg.norm(blended)
        out.append(scale * np.array([blended @ (t / np.linalg.norm(t)) for t in text]))
    return np.array(out)


def test_residual_blend_matches_a_hand_computation(tiny_backbone):
    method = build_method("clip_adapter", tiny_backbone)
    dim = tiny_backbone.embed_dim
    w1, w2 = method.adapter[0].weight.detach().numpy(), method.adapter[2].weight.detach().numpy()
    assert w1.shape == (dim // 4, dim) and w2.shape == (dim, dim // 4)
    assert method.adapter[0].bias is None and method.adapter[2].bias is None
    features = F.normalize(torch.randn(3, dim), dim=-1)
    text = tiny_backbone.encode_text(tiny_backbone.tokenize([f"a photo of a {n}." for n in NAMES])).detach()
    with torch.no_grad():
        got = method.logits(features, NAMES).numpy()
    expected = hand_logits(features.double().numpy(), w1, w2, text.double().numpy(), 0.2, tiny_backbone.logit_scale)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_adapter_on_the_normalized_cached_feature_equals_adapter_on_the_raw_feature(tiny_backbone):
    # The authors adapt the raw CLIP feature; the adapter is positively homogeneous, so the
    # normalized (cacheable) feature gives the same logits.
    method = build_method("clip_adapter", tiny_backbone)
    raw = torch.randn(4, tiny_backbone.embed_dim) * 7.0
    with torch.no_grad():
        assert torch.allclose(method.logits(raw, NAMES), method.logits(F.normalize(raw, dim=-1), NAMES), atol=1e-4)


def test_global_variant_uploads_the_whole_adapter(tiny_backbone):
    method = build_method("clip_adapter", tiny_backbone)
    keys = {"adapter.0.weight", "adapter.2.weight"}
    assert set(method.client_state()) == keys
    assert set(method.uploaded_state()) == keys


def test_personalized_variant_uploads_nothing(tiny_backbone):
    method = build_method("clip_adapter", tiny_backbone, {"personalized": True})
    assert set(method.client_state()) == {"adapter.0.weight", "adapter.2.weight"}
    assert method.uploaded_state() == {}
    assert type(method).upload_keys == ("adapter.*",)  # the class (global variant) is untouched


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_counts_on_vit_b16(vit_b16):
    assert build_method("clip_adapter", vit_b16).parameter_counts() == {
        "trainable_params": 2 * 512 * 128,
        "uploaded_params": 2 * 512 * 128,
    }
    assert build_method("clip_adapter", vit_b16, {"personalized": True}).parameter_counts() == {
        "trainable_params": 131_072,
        "uploaded_params": 0,
    }


@pytest.mark.parametrize("personalized", [False, True])
def test_run_experiment_end_to_end(fake_data_root, tmp_path, personalized):
    config = tiny_config(fake_data_root, tmp_path, method="clip_adapter", method_args={"personalized": personalized})
    result = run_experiment(config, progress=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    dim = load_backbone("fedbench-tiny-vit", None).embed_dim
    assert summary["trainable_params"] == 2 * dim * (dim // 4)
    assert summary["uploaded_params"] == (0 if personalized else 2 * dim * (dim // 4))
    assert summary["bytes_up_total"] == (0 if personalized else 2 * 3 * 2 * dim * (dim // 4) * 4)
    assert summary["train_features_cached"] is True
    assert all(np.isfinite(v) for v in summary["metrics"].values())
