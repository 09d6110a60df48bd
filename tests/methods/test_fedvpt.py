"""FedVPT: the deep prompts' count on ViT-B/16, the forward against the image tower written
out by hand, where the prompts enter (appended before ln_pre, replaced at every prompted
block, carried on after), and that only the prompts learn."""

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
PATCHES = (32 // 8) ** 2  # the tiny model: 32 px images, patch 8


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_count_on_vit_b16(vit_b16):
    method = build_method("fedvpt", vit_b16)
    assert method.prompts.shape == (12, 8, 768)  # depth 0 = every one of the 12 blocks
    assert method.parameter_counts() == {"trainable_params": 73_728, "uploaded_params": 73_728}
    shallow = build_method("fedvpt", vit_b16, {"depth": 1})
    assert shallow.parameter_counts()["trainable_params"] == 8 * 768


def reference_logits(method, images, deep_blocks):
    model, prompts = method.backbone.model, method.prompts.detach()
    image = ref.normalize(
        ref.image_features(model, images, visual_prompts=prompts[0], visual_deep={i: prompts[i] for i in deep_blocks})
    )
    text = ref.normalize(ref.text_features(model, ref.tokenize([f"a photo of a {n}." for n in NAMES])))
    return method.backbone.logit_scale * image @ text.T


@pytest.mark.parametrize("depth, deep_blocks", [(0, [1, 2, 3]), (2, [1])])
def test_forward_matches_the_formulas(tiny_backbone, depth, deep_blocks):
    torch.manual_seed(0)
    method = build_method("fedvpt", tiny_backbone, {"depth": depth}).eval()
    images = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        got = method.logits(images, NAMES)
        expected = reference_logits(method, images, deep_blocks)
    assert got.shape == (5, 3)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("depth", [0, 2])
def test_prompts_are_appended_then_replaced_per_block(tiny_backbone, depth):
    torch.manual_seed(0)
    method = build_method("fedvpt", tiny_backbone, {"depth": depth, "n_ctx": 3}).eval()
    visual = tiny_backbone.model.visual
    prompts = method.prompts.detach()
    with torch.no_grad(), ref.BlockInputs(visual.transformer.resblocks) as seen:
        method.encode_images(torch.randn(2, 3, 32, 32))
    blocks = tiny_backbone.vision.blocks
    for i in range(blocks):  # the sequence is CLS + patches + 3 prompts at every block
        assert seen.inputs[i].shape == (2, 1 + PATCHES + 3, tiny_backbone.vision.width)
    with torch.no_grad():  # block 0: the prompts, through ln_pre, after CLS and patches
        torch.testing.assert_close(seen.inputs[0][0, -3:], visual.ln_pre(prompts[0]), rtol=1e-5, atol=1e-5)
    prompted = depth or blocks
    for i in range(1, blocks):
        last = seen.inputs[i][:, -3:]
        if i < prompted:  # replaced by this block's own prompts
            assert torch.equal(last, prompts[i].expand(2, -1, -1))
        else:  # carried on: whatever the previous block made of them
            assert not torch.allclose(last[0], prompts[-1], atol=1e-3)
    with torch.no_grad():
        block_output = visual.transformer.resblocks[prompted - 1](seen.inputs[prompted - 1])
    if prompted < blocks:
        torch.testing.assert_close(seen.inputs[prompted], block_output, rtol=1e-5, atol=1e-5)


def test_only_the_prompts_learn(tiny_backbone):
    torch.manual_seed(0)
    method = build_method("fedvpt", tiny_backbone).train()
    loss = F.cross_entropy(method.logits(torch.randn(4, 3, 32, 32), NAMES), torch.tensor([0, 1, 2, 0]))
    loss.backward()
    ref.grads_only_in(method, {"prompts"})
    assert (method.prompts.grad.flatten(1).abs().sum(1) > 0).all()  # every block's prompts get gradient
    assert set(method.uploaded_state()) == set(method.client_state()) == {"prompts"}


def test_depth_beyond_the_tower_is_a_clear_error(tiny_backbone):
    with pytest.raises(ValueError, match="depth 5 does not fit backbone 'fedbench-tiny-vit'.*4 blocks"):
        build_method("fedvpt", tiny_backbone, {"depth": 5})


def test_runs_end_to_end(fedbench, fake_data_root, tmp_path):
    summary = run_tiny_cell(fedbench, "fedvpt", fake_data_root, tmp_path)
    assert summary["bytes_up_total"] == 2 * 2 * (4 * 8 * 64) * 4  # 4 blocks x 8 tokens x width 64, fp32
    assert summary["train_features_cached"] is False  # the prompts change the image features
    assert all(math.isfinite(v) for v in summary["metrics"].values())


def test_without_prompts_the_backbone_image_path_is_open_clips_own(tiny_backbone):
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(tiny_backbone.encode_image(images), tiny_backbone.model.encode_image(images))
        torch.testing.assert_close(tiny_backbone.encode_image(images), ref.image_features(tiny_backbone.model, images))
