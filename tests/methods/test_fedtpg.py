"""FedTPG: the prompt translator's count on ViT-B/16, its forward against a computation
written out from the paper's formulas, where the prompt enters the text tower, and that
only the translator learns."""

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
    method = build_method("fedtpg", vit_b16)
    # queries 4x512; two LayerNorms; MHA 512, 4 heads (in 3x512x512 + 3x512, out 512x512 + 512);
    # FFN: LayerNorm, Linear 512 -> 4096, GEGLU, Linear 2048 -> 512.
    expected = (
        4 * 512 + 2 * 1024 + (3 * 512 * 512 + 3 * 512 + 512 * 512 + 512) + (1024 + 512 * 4096 + 4096 + 2048 * 512 + 512)
    )
    assert expected == 4_206_080
    assert method.parameter_counts() == {"trainable_params": 4_206_080, "uploaded_params": 4_206_080}


def reference_prompt(state: dict, context, heads: int):
    """P = a + FFN(a), a = MHA(LN_q(Q), LN_c(c), LN_c(c)), by hand."""
    ln = lambda x, name: F.layer_norm(x, x.shape[-1:], state[f"{name}.weight"], state[f"{name}.bias"])  # noqa: E731
    queries = ln(state["translator.queries"], "translator.norm_queries")
    context = ln(context, "translator.norm_context")
    n, width = queries.shape
    if "translator.attention.in_proj_weight" in state:
        wq, wk, wv = state["translator.attention.in_proj_weight"].split(width)
    else:  # keys of another width than the queries (the tiny model: 32 vs 64)
        wq, wk, wv = (state[f"translator.attention.{p}_proj_weight"] for p in "qkv")
    bq, bk, bv = state["translator.attention.in_proj_bias"].split(width)
    dh = width // heads
    q = (queries @ wq.T + bq).view(n, heads, dh).transpose(0, 1)
    k = (context @ wk.T + bk).view(len(context), heads, dh).transpose(0, 1)
    v = (context @ wv.T + bv).view(len(context), heads, dh).transpose(0, 1)
    attended = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(dh), dim=-1) @ v  # [heads, n, dh]
    a = attended.transpose(0, 1).reshape(n, width) @ state["translator.attention.out_proj.weight"].T
    a = a + state["translator.attention.out_proj.bias"]
    h = ln(a, "translator.feed_forward.0")
    h = h @ state["translator.feed_forward.1.weight"].T + state["translator.feed_forward.1.bias"]
    value, gate = h.chunk(2, dim=-1)
    h = value * F.gelu(gate)
    h = h @ state["translator.feed_forward.3.weight"].T + state["translator.feed_forward.3.bias"]
    return a + h


def perturbed(method):
    """Non-trivial LayerNorm and bias values, so the reference is checked on all of them."""
    with torch.no_grad():
        for p in method.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return method


def test_forward_matches_the_formulas(tiny_backbone):
    torch.manual_seed(0)
    method = perturbed(build_method("fedtpg", tiny_backbone)).eval()
    model = tiny_backbone.model
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        got = method.logits(images, NAMES)
        state = method.state_dict()
        context = ref.normalize(ref.text_features(model, ref.tokenize(NAMES)))  # bare names, no template
        prompt = reference_prompt(state, context, heads=4)
        assert prompt.shape == (4, tiny_backbone.text.width)
        tokens, embeddings = ref.prompt_embeddings(model, NAMES, prompt, "X X X X")
        text = ref.normalize(ref.text_features(model, tokens, embeddings))
        image = ref.normalize(ref.image_features(model, images))
        expected = tiny_backbone.logit_scale * image @ text.T
    assert got.shape == (5, 3)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_prompt_is_shared_by_the_classes_and_depends_on_the_class_set(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedtpg", tiny_backbone).eval()
    model = tiny_backbone.model
    width, pos = tiny_backbone.text.width, model.positional_embedding
    with torch.no_grad(), ref.BlockInputs(model.transformer.resblocks) as seen:
        method.encode_classes(NAMES)
    first = seen.inputs[0]  # [C, L, W]: the text tower's input
    prompt_in = first[:, 1:5] - pos[1:5]
    assert prompt_in.shape == (3, 4, width)
    assert torch.allclose(prompt_in[0], prompt_in[1], atol=1e-6) and torch.allclose(
        prompt_in[0], prompt_in[2], atol=1e-6
    )
    with torch.no_grad():
        own = method.translator(method.class_name_embeddings(NAMES))
        other = method.translator(method.class_name_embeddings(NAMES[:2]))
    torch.testing.assert_close(prompt_in[0], own, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(own, other, atol=1e-4)  # generated from the class set


def test_only_the_translator_learns(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedtpg", tiny_backbone).train()
    loss = F.cross_entropy(method.logits(torch.randn(4, 3, 32, 32), NAMES), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    expected = {n for n, _ in method.translator.named_parameters(prefix="translator")}
    ref.grads_only_in(method, expected)
    assert set(method.uploaded_state()) == set(method.client_state()) == expected


def test_runs_end_to_end(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "fedtpg", fake_data_root, tmp_path)
    params = build_method("fedtpg", load_backbone(ref.TINY, None)).parameter_counts()["uploaded_params"]
    assert summary["bytes_up_total"] == 2 * 2 * params * 4
    assert all(math.isfinite(v) for v in summary["metrics"].values())
