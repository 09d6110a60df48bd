"""FedMaPLe: the count on ViT-B/16, both towers' forward against a computation written out
from MaPLe's formulas, where the coupled prompts enter each tower, and what learns."""

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
PATCHES = (32 // 8) ** 2


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_count_on_vit_b16(vit_b16):
    method = build_method("fedmaple", vit_b16)
    linear = 512 * 768 + 768
    expected = 2 * 512 + linear + 8 * 2 * 512 + 8 * linear  # ctx, proj, 8 deep text prompts, 8 projections
    assert expected == 3_555_072
    assert method.parameter_counts() == {"trainable_params": 3_555_072, "uploaded_params": 3_555_072}


def test_context_is_a_photo_and_the_prompt_keeps_of_a(tiny_backbone):
    method = build_method("fedmaple", tiny_backbone, {"depth": 3})
    tokens = ref.tokenize(["a photo of a texture_a."])
    with torch.no_grad():
        words = tiny_backbone.model.token_embedding(tokens)[0]
    torch.testing.assert_close(method.ctx.detach(), words[1:3])  # "a", "photo"
    layout = method.prompts.layout(["texture_a"])
    assert torch.equal(layout.tokens[0], tokens[0])
    torch.testing.assert_close(layout.suffix[0], words[3:])  # "of a texture_a." and the rest


def coupled(method):
    state = method.state_dict()
    text_deep = {i + 1: p for i, p in enumerate(state["text_prompts"])}
    visual_deep = {
        i + 1: p @ state[f"projections.{i}.weight"].T + state[f"projections.{i}.bias"]
        for i, p in enumerate(state["text_prompts"])
    }
    visual_prompts = state["ctx"] @ state["proj.weight"].T + state["proj.bias"]
    return state, text_deep, visual_prompts, visual_deep


def test_forward_matches_the_formulas(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedmaple", tiny_backbone, {"depth": 3}).eval()
    model = tiny_backbone.model
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        got = method.logits(images, NAMES)
        state, text_deep, visual_prompts, visual_deep = coupled(method)
        assert sorted(text_deep) == sorted(visual_deep) == [1, 2]  # blocks 1 .. depth - 1; block 3 carries on
        tokens, embeddings = ref.prompt_embeddings(model, NAMES, state["ctx"], "a photo of a")
        text = ref.normalize(ref.text_features(model, tokens, embeddings, text_deep=text_deep))
        image = ref.normalize(ref.image_features(model, images, visual_prompts=visual_prompts, visual_deep=visual_deep))
        expected = tiny_backbone.logit_scale * image @ text.T
    assert got.shape == (5, 3)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_where_the_prompts_enter_both_towers(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedmaple", tiny_backbone, {"depth": 3}).eval()
    model = tiny_backbone.model
    with torch.no_grad():
        state, text_deep, visual_prompts, visual_deep = coupled(method)
        with ref.BlockInputs(model.transformer.resblocks) as text_seen:
            method.encode_classes(NAMES)
        with ref.BlockInputs(model.visual.transformer.resblocks) as vision_seen:
            method.encode_images(torch.randn(2, 3, 32, 32))
        # layer 0: the text ctx carries positional embeddings, the vision prompts none (then ln_pre)
        pos = model.positional_embedding
        torch.testing.assert_close(text_seen.inputs[0][:, 1:3], (state["ctx"] + pos[1:3]).expand(3, -1, -1))
        torch.testing.assert_close(vision_seen.inputs[0][0, -2:], model.visual.ln_pre(visual_prompts))
    for i in (1, 2):
        assert torch.equal(text_seen.inputs[i][:, 1:3], text_deep[i].expand(3, -1, -1))
        torch.testing.assert_close(vision_seen.inputs[i][:, -2:], visual_deep[i].expand(2, -1, -1))
    assert vision_seen.inputs[3].shape == (2, 1 + PATCHES + 2, tiny_backbone.vision.width)
    assert not torch.allclose(text_seen.inputs[3][:, 1:3], text_deep[2], atol=1e-3)  # block 3: carried on


def test_everything_in_the_prompt_learner_learns_and_nothing_else(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedmaple", tiny_backbone, {"depth": 3}).train()
    loss = F.cross_entropy(method.logits(torch.randn(4, 3, 32, 32), NAMES), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    expected = {"ctx", "proj.weight", "proj.bias", "text_prompts"}
    expected |= {f"projections.{i}.{p}" for i in range(2) for p in ("weight", "bias")}
    ref.grads_only_in(method, expected)
    assert set(method.uploaded_state()) == set(method.client_state()) == expected


def test_the_deep_projections_start_identical_and_train_apart(tiny_backbone):
    # MaPLe builds one Linear and deep-copies it (_get_clones): the 8 deep projections (here
    # depth - 1 = 3) start equal; the layer-0 proj is a separate draw.
    torch.manual_seed(0)
    method = build_method("fedmaple", tiny_backbone, {"depth": 4})
    first, *others = method.projections
    assert len(others) == 2
    for other in others:
        torch.testing.assert_close(other.weight, first.weight, rtol=0, atol=0)
        torch.testing.assert_close(other.bias, first.bias, rtol=0, atol=0)
        assert other.weight.data_ptr() != first.weight.data_ptr()  # copies, not one shared module
    assert not torch.equal(method.proj.weight, first.weight)
    assert first.weight.abs().sum() > 0  # a real initialisation, not zeros
    with torch.no_grad():
        first.weight.add_(1.0)  # one trains apart from the others
    assert not torch.equal(others[0].weight, first.weight)
    assert len([k for k in method.state_dict() if k.startswith("projections.")]) == 6  # 3 x (weight, bias)


def test_depth_beyond_the_towers_is_a_clear_error(tiny_backbone):
    with pytest.raises(ValueError, match=r"depth 9 does not fit backbone 'fedbench-tiny-vit'.*--depth between 1 and 4"):
        build_method("fedmaple", tiny_backbone)


def test_runs_end_to_end(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "fedmaple", fake_data_root, tmp_path, "--depth", 3)
    params = build_method("fedmaple", load_backbone(ref.TINY, None), {"depth": 3}).parameter_counts()
    assert summary["bytes_up_total"] == 2 * 2 * params["uploaded_params"] * 4
    assert all(math.isfinite(v) for v in summary["metrics"].values())
