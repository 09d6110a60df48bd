"""FedCoCoOp: the count on ViT-B/16, the image-conditioned forward against a computation
written out from CoCoOp's formulas, the context's initialisation and what learns."""

from __future__ import annotations

import math

import clip_reference as ref
import pytest
import torch
import torch.nn.functional as F
from conftest import run_tiny_cell

import methods.fedcocoop as fedcocoop
from benchmark.backbone import load_backbone
from benchmark.registry import build_method

NAMES = ["texture_a", "texture_b", "texture_c"]


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_count_on_vit_b16(vit_b16):
    method = build_method("fedcocoop", vit_b16)
    expected = 4 * 512 + (512 * 32 + 32) + (32 * 512 + 512)  # ctx; meta-net 512 -> 32 -> 512
    assert expected == 35_360
    assert method.parameter_counts() == {"trainable_params": 35_360, "uploaded_params": 35_360}


def test_context_starts_from_a_photo_of_a(tiny_backbone):
    method = build_method("fedcocoop", tiny_backbone)
    tokens = ref.tokenize(["a photo of a"])
    with torch.no_grad():
        words = tiny_backbone.model.token_embedding(tokens)[0, 1:5]
    torch.testing.assert_close(method.ctx.detach(), words)
    random = build_method("fedcocoop", tiny_backbone, {"ctx_init": "", "n_ctx": 6})
    assert random.ctx.shape == (6, tiny_backbone.text.width)
    assert random.ctx.std().item() == pytest.approx(0.02, rel=0.3)


def reference_logits(method, images, names):
    """pi = meta_net(f); per image b, ctx + pi_b spliced into "[SOS] ctx {name}."."""
    model, state = method.backbone.model, method.state_dict()
    f = ref.normalize(ref.image_features(model, images))
    hidden = torch.relu(f @ state["meta_net.0.weight"].T + state["meta_net.0.bias"])
    pi = hidden @ state["meta_net.2.weight"].T + state["meta_net.2.bias"]
    rows = []
    for b in range(len(images)):
        tokens, embeddings = ref.prompt_embeddings(model, names, state["ctx"] + pi[b], "a photo of a")
        text = ref.normalize(ref.text_features(model, tokens, embeddings))
        rows.append(method.backbone.logit_scale * f[b] @ text.T)
    return torch.stack(rows)


def test_forward_matches_the_formulas(tiny_backbone, monkeypatch):
    torch.manual_seed(0)
    method = build_method("fedcocoop", tiny_backbone).eval()
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        got = method.logits(images, NAMES)
        expected = reference_logits(method, images, NAMES)
        monkeypatch.setattr(fedcocoop, "MAX_PROMPTS_PER_PASS", 4)  # chunks of one image: same numbers
        chunked = method.logits(images, NAMES)
    assert got.shape == (5, 3)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(chunked, got, rtol=1e-5, atol=1e-5)


def test_each_image_gets_its_own_prompts(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedcocoop", tiny_backbone).eval()
    model = tiny_backbone.model
    features = ref.normalize(torch.randn(2, tiny_backbone.embed_dim))
    with torch.no_grad(), ref.BlockInputs(model.transformer.resblocks) as seen:
        method.classify(features, method.encode_classes(NAMES))
    first = seen.inputs[0]  # [B * C, L, W]: 2 images x 3 classes
    assert first.shape[0] == 6
    ctx_in = (first[:, 1:5] - model.positional_embedding[1:5]).view(2, 3, 4, -1)
    with torch.no_grad():
        bias = method.meta_net(features)
    for b in range(2):
        for c in range(3):  # the same context for every class of an image ...
            torch.testing.assert_close(ctx_in[b, c], method.ctx + bias[b], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ctx_in[0, 0], ctx_in[1, 0], atol=1e-5)  # ... and another for the next image


def test_only_ctx_and_meta_net_learn(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedcocoop", tiny_backbone).train()
    loss = F.cross_entropy(method.logits(torch.randn(4, 3, 32, 32), NAMES), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    expected = {"ctx", "meta_net.0.weight", "meta_net.0.bias", "meta_net.2.weight", "meta_net.2.bias"}
    ref.grads_only_in(method, expected)
    assert set(method.uploaded_state()) == set(method.client_state()) == expected


def test_runs_end_to_end(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "fedcocoop", fake_data_root, tmp_path)
    params = build_method("fedcocoop", load_backbone(ref.TINY, None)).parameter_counts()["uploaded_params"]
    assert summary["bytes_up_total"] == 2 * 2 * params * 4
    assert summary["train_features_cached"] is True  # the meta-net reads the frozen feature
    assert all(math.isfinite(v) for v in summary["metrics"].values())
