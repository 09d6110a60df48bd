"""FedPGP: prompt composition, the contrastive loss, the training loss, state split, counts."""

from __future__ import annotations

import json
import math

import clip_reference as ref
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark.backbone import load_backbone
from benchmark.method import ClientContext, ClientUpdate
from benchmark.registry import build_method
from benchmark.runs.runner import run_experiment
from methods.fedpgp import contrastive_loss

NAMES = ("texture_a", "texture_b", "texture_c")


def cos(x: np.ndarray, y: np.ndarray) -> float:
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def hand_contrastive(anchor, global_only, full, tau) -> float:
    """mean over classes of -log softmax([cos(anchor, sigma), cos(sigma, full)] / tau)[0]."""
    losses = []
    for a, s, f in zip(anchor, global_only, full):
        pos, neg = cos(a, s) / tau, cos(s, f) / tau
        losses.append(-pos + math.log(math.exp(pos) + math.exp(neg)))
    return float(np.mean(losses))


def test_contrastive_loss_matches_a_hand_computation():
    anchor = torch.tensor([[1.0, 0.0, 0.0], [0.0, 2.0, 1.0]])
    global_only = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    full = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 3.0]])
    # Class 0: cos(a, s) = 1/sqrt2, cos(s, f) = 1/sqrt2 -> both logits equal -> log 2.
    got = contrastive_loss(anchor, global_only, full, temperature=0.5)
    assert got.item() == pytest.approx(
        hand_contrastive(anchor.numpy(), global_only.numpy(), full.numpy(), 0.5), rel=1e-6
    )
    assert contrastive_loss(anchor[:1], global_only[:1], full[:1], 0.5).item() == pytest.approx(math.log(2), rel=1e-6)


def test_prompt_is_low_rank_personal_part_plus_global_part(tiny_backbone):
    method = build_method("fedpgp", tiny_backbone)
    width = tiny_backbone.text.width
    assert method.U.shape == (16, 8) and method.V.shape == (8, width) and method.sigma.shape == (16, width)
    expected_ctx = method.U.detach() @ method.V.detach() + method.sigma.detach()
    assert torch.allclose(method.context().detach(), expected_ctx)
    # Evaluation logits use sigma + UV, in CoOp's prompt (CLIP's raw modules: tests/clip_reference.py).
    images = torch.randn(2, tiny_backbone.embed_dim)
    model = tiny_backbone.model
    with torch.no_grad():
        text = ref.normalize(ref.coop_text_features(model, list(NAMES), expected_ctx))
        expected = model.logit_scale.exp() * F.normalize(images, dim=-1) @ text.t()
        assert torch.allclose(method.logits(F.normalize(images, dim=-1), NAMES), expected, atol=1e-5)


def test_training_loss_is_cross_entropy_plus_mu_times_contrastive(tiny_backbone):
    method = build_method("fedpgp", tiny_backbone, {"mu": 0.5, "temperature": 0.5})
    method.set_client(ClientContext(0, 1, NAMES, 4))
    features = F.normalize(torch.randn(4, tiny_backbone.embed_dim), dim=-1)
    labels = torch.tensor([0, 2, 1, 2])
    with torch.no_grad():
        loss = method.training_step((features, labels), 0).item()
        # Independent pieces from CLIP's raw modules (tests/clip_reference.py), never through
        # the suite's prompts or backbone: the anchor is the init string's plain text feature.
        model = tiny_backbone.model
        anchor = ref.text_features(model, ref.tokenize([" ".join(["X"] * 16) + f" {name}." for name in NAMES]))
        global_only = ref.coop_text_features(model, list(NAMES), method.sigma)
        full = ref.coop_text_features(model, list(NAMES), method.U @ method.V + method.sigma)
    logits = model.logit_scale.exp().item() * features.numpy() @ F.normalize(full, dim=-1).numpy().T
    log_softmax = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
        - logits.max(1, keepdims=True)
    )
    ce = -np.mean(log_softmax[np.arange(4), labels.numpy()])
    expected = ce + 0.5 * hand_contrastive(anchor.numpy(), global_only.numpy(), full.numpy(), 0.5)
    assert loss == pytest.approx(expected, rel=1e-4)


def test_gradient_of_the_contrastive_term_reaches_all_three_parts(tiny_backbone):
    method = build_method("fedpgp", tiny_backbone)
    method.set_client(ClientContext(0, 1, NAMES, 2))
    method.training_step(
        (F.normalize(torch.randn(2, tiny_backbone.embed_dim), dim=-1), torch.tensor([0, 1])), 0
    ).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (method.sigma, method.U, method.V))


def test_sigma_is_uploaded_and_averaged_while_u_and_v_stay_personal(tiny_backbone):
    method = build_method("fedpgp", tiny_backbone)
    assert set(method.client_state()) == {"sigma", "U", "V"}
    assert set(method.uploaded_state()) == {"sigma"}
    personal = {k: v.clone() for k, v in method.client_state().items() if k != "sigma"}
    shape = method.sigma.shape
    updates = [ClientUpdate(0, 1, {"sigma": torch.zeros(shape)}), ClientUpdate(1, 3, {"sigma": torch.ones(shape)})]
    method.load_client_state(method.download(0, method.aggregate(updates), {}))
    assert torch.allclose(method.sigma, torch.full(shape, 0.75))
    assert all(torch.equal(method.client_state()[k], v) for k, v in personal.items())


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_counts_on_vit_b16(vit_b16):
    method = build_method("fedpgp", vit_b16)
    assert method.parameter_counts() == {"trainable_params": 16 * 512 + 16 * 8 + 8 * 512, "uploaded_params": 16 * 512}
    assert method.parameter_counts()["trainable_params"] == 12_416


def test_run_experiment_end_to_end(fake_data_root, tmp_path):
    result = run_experiment(tiny_config(fake_data_root, tmp_path, method="fedpgp"), progress=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    width = load_backbone("fedbench-tiny-vit", None).text.width
    assert summary["trainable_params"] == 16 * width + 16 * 8 + 8 * width
    assert summary["uploaded_params"] == 16 * width
    assert summary["bytes_up_per_round"][0] == 3 * 16 * width * 4  # 3 clients send sigma only
    assert all(np.isfinite(v) for v in summary["metrics"].values())
