"""CLIP-LoRA: the wrapped block against open_clip's block with merged dense weights,
dropout, scaling, init, what is uploaded, counts on ViT-B/16, an end-to-end run."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config, write_split_zhou

from benchmark.backbone import load_backbone
from benchmark.runs.runner import run_experiment
from methods.lora import CLIPLoRA

NAMES = ["red circle", "blue square", "green star"]


def with_random_b(method: CLIPLoRA, seed: int = 1) -> CLIPLoRA:
    """B is zero at init, which would make every test of the LoRA path vacuous."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in method.lora.named_parameters():
            if name.endswith(".B"):
                p.copy_(torch.randn_like(p) * 0.2)
    return method


def merged_block(block, lora_block, rank: int, alpha: float):
    """open_clip's block with in_proj_weight = W + (alpha / sqrt(r)) B A for q, k and v."""
    dense = copy.deepcopy(block)
    deltas = [(alpha / math.sqrt(rank)) * p.B @ p.A for p in (lora_block.q, lora_block.k, lora_block.v)]
    with torch.no_grad():
        dense.attn.in_proj_weight += torch.cat(deltas)
    return dense


def block_input(backbone, tower: str):
    if tower == "text":  # causal additive mask over the full context
        return torch.randn(2, backbone.context_length, backbone.text.width), backbone.model.attn_mask
    return torch.randn(2, 17, backbone.vision.width), None  # 16 patches + class token


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


@pytest.mark.parametrize("rank, alpha", [(2, 1.0), (4, 1.0), (3, 2.5)])
@pytest.mark.parametrize("tower", ["text", "vision"])
def test_wrapped_block_equals_dense_block_with_merged_weights(tiny_backbone, tower, rank, alpha):
    method = with_random_b(CLIPLoRA(tiny_backbone, rank=rank, alpha=alpha)).eval()
    for index in (0, 3):
        block, lora_block = tiny_backbone.blocks(tower)[index], method.lora[tower][index]
        x, mask = block_input(tiny_backbone, tower)
        expected = merged_block(block, lora_block, rank, alpha)(x, attn_mask=mask)
        assert torch.allclose(lora_block(block, x, mask), expected, atol=1e-5)
        assert not torch.allclose(block(x, attn_mask=mask), expected, atol=1e-3)  # the update matters


def test_whole_model_equals_open_clip_with_merged_weights(tiny_backbone):
    method = with_random_b(CLIPLoRA(tiny_backbone)).eval()
    model = copy.deepcopy(tiny_backbone.model)
    towers = {"text": model.transformer.resblocks, "vision": model.visual.transformer.resblocks}
    for tower, blocks in towers.items():
        for index, block in enumerate(blocks):
            merged = merged_block(block, method.lora[tower][index], 2, 1.0)
            block.attn.in_proj_weight.data.copy_(merged.attn.in_proj_weight)
    images = torch.randn(3, 3, 32, 32)
    image = F.normalize(model.encode_image(images), dim=-1)
    text = F.normalize(model.encode_text(tiny_backbone.tokenize([f"a photo of a {n}." for n in NAMES])), dim=-1)
    expected = model.logit_scale.exp() * image @ text.t()
    assert torch.allclose(method.logits(images, NAMES), expected, atol=1e-4)


def test_dropout_acts_on_the_lora_input_in_training_only(tiny_backbone):
    method = with_random_b(CLIPLoRA(tiny_backbone, dropout=0.25))
    block, lora_block = tiny_backbone.blocks("vision")[1], method.lora["vision"][1]
    x, _ = block_input(tiny_backbone, "vision")
    method.train()
    torch.manual_seed(0)
    first = lora_block(block, x, None)
    second = lora_block(block, x, None)
    assert not torch.allclose(first, second)
    method.eval()
    assert torch.equal(lora_block(block, x, None), lora_block(block, x, None))
    no_dropout = with_random_b(CLIPLoRA(tiny_backbone, dropout=0.0)).train()
    no_dropout.load_state_dict(method.state_dict())
    assert torch.allclose(lora_block(block, x, None), no_dropout.lora["vision"][1](block, x, None), atol=1e-6)
    # The frozen path never sees dropout: with B = 0 the training output is the plain block.
    fresh = CLIPLoRA(tiny_backbone, dropout=0.25).train()
    assert torch.allclose(fresh.lora["vision"][1](block, x, None), block(x), atol=1e-5)


def test_scaling_is_alpha_over_sqrt_rank(tiny_backbone):
    for rank, alpha in ((2, 1.0), (4, 1.0), (8, 2.0)):
        method = CLIPLoRA(tiny_backbone, rank=rank, alpha=alpha)
        assert method.scaling == pytest.approx(alpha / math.sqrt(rank))
        assert method.lora["text"][0].q.scaling == pytest.approx(alpha / math.sqrt(rank))


def test_init_a_kaiming_uniform_b_zero(tiny_backbone):
    torch.manual_seed(0)
    method = CLIPLoRA(tiny_backbone)
    for name, p in method.lora.named_parameters():
        if name.endswith(".B"):
            assert p.abs().sum() == 0
        else:  # kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = W
            bound = 1 / math.sqrt(p.shape[1])
            assert p.shape[0] == 2 and p.abs().max() <= bound and p.abs().max() > 0.5 * bound


def test_every_lora_weight_is_uploaded_nothing_is_personal(tiny_backbone):
    method = CLIPLoRA(tiny_backbone)
    state = method.client_state()
    expected = {
        f"lora.{tower}.{i}.{proj}.{m}"
        for tower in ("text", "vision")
        for i in range(4)
        for proj in ("q", "k", "v")
        for m in ("A", "B")
    }
    assert set(state) == expected
    assert set(method.uploaded_state()) == expected
    assert method.parameter_counts() == {"trainable_params": 6144, "uploaded_params": 6144}


def test_optimizer_is_adamw_with_cosine_to_min_lr(tiny_backbone):
    from types import SimpleNamespace

    method = CLIPLoRA(tiny_backbone)
    method._trainer = SimpleNamespace(estimated_stepping_batches=6)
    config = method.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert isinstance(optimizer, torch.optim.AdamW)
    group = optimizer.param_groups[0]
    assert (group["lr"], group["weight_decay"], group["betas"]) == (2e-4, 1e-2, (0.9, 0.999))
    assert sum(p.numel() for p in group["params"]) == 6144
    for _ in range(6):
        optimizer.step()
        scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-6)


def test_parameter_counts_on_vit_b16(vit_b16):
    method = CLIPLoRA(vit_b16)
    text = sum(p.numel() for p in method.lora["text"].parameters())
    vision = sum(p.numel() for p in method.lora["vision"].parameters())
    assert (text, vision) == (12 * 3 * 2 * (512 + 512), 12 * 3 * 2 * (768 + 768)) == (73_728, 110_592)
    assert method.parameter_counts() == {"trainable_params": 184_320, "uploaded_params": 184_320}


def test_run_experiment_federates_all_lora_weights(tmp_path_factory, tmp_path):
    data = write_split_zhou(tmp_path_factory.mktemp("lora_data"), num_classes=16)  # 8 base: 2 per client
    config = tiny_config(data, tmp_path, method="lora", rounds=3, clients=4)
    result = run_experiment(config, progress=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["trainable_params"] == summary["uploaded_params"] == 6144
    assert summary["bytes_up_per_round"] == [4 * 6144 * 4] * 3
    assert summary["bytes_down_per_round"] == [0, 4 * 6144 * 4, 4 * 6144 * 4]
    assert not summary["train_features_cached"]
    states = list(result.federation.client_states.values())
    # A global method: every client ends with the same (final FedAvg) weights, and B trained.
    for state in states[1:]:
        assert all(torch.equal(state[k], states[0][k]) for k in state)
    assert states[0]["lora.text.0.q.B"].abs().sum() > 0
    assert 0.0 <= summary["metrics"]["HM"] <= 100.0
