"""PromptFL: the forward against CoOp's formula computed from CLIP's raw modules; the context
length is a hyperparameter (the FedTPG/FedMVP papers use 4); the default stays CoOp's 16.
The optimizer is CoOp's recipe with its warm-up epoch, like pFedMoAP's prompt."""

from __future__ import annotations

import math
from types import SimpleNamespace

import clip_reference as ref
import pytest
import torch

from benchmark.backbone import load_backbone
from benchmark.registry import build_method
from methods.pfedmoap import PFedMoAP
from methods.promptfl import PromptFL


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_counts_on_vit_b16(vit_b16):
    assert build_method("promptfl", vit_b16).parameter_counts() == {"trainable_params": 8_192, "uploaded_params": 8_192}
    assert build_method("promptfl", vit_b16, {"n_ctx": 4}).parameter_counts() == {
        "trainable_params": 2_048,
        "uploaded_params": 2_048,
    }


def test_describe_counts_the_instance_its_flags_build(vit_b16, fedbench):
    done = fedbench("methods", "--describe", "promptfl", "--backbone", "ViT-B-16", "--n-ctx", 4)
    assert done.returncode == 0, done.stderr
    assert "on ViT-B-16 with n_ctx = 4: 2,048 trainable parameters, 2,048 uploaded" in done.stdout
    assert "--n-ctx int = 16" in done.stdout  # the default is unchanged
    bad = fedbench("methods", "--describe", "promptfl", "--backbone", "ViT-B-16", "--depth", 3)
    assert bad.returncode == 2 and "unrecognized arguments --depth 3 for method 'promptfl'" in bad.stderr
    stray = fedbench("methods", "--n-ctx", 4)
    assert stray.returncode == 2 and "go with --describe NAME" in stray.stderr


def lrs(method, steps: int, epochs: int, group: int = 0) -> list[float]:
    method._trainer = SimpleNamespace(estimated_stepping_batches=steps, max_epochs=epochs)
    config = method.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[group]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_warm_up_epoch_then_cosine_as_pfedmoaps_prompt(tiny_backbone):
    torch.manual_seed(0)
    promptfl = PromptFL(tiny_backbone)
    seen = lrs(promptfl, 10, 2)
    assert seen[:5] == pytest.approx([1e-5] * 5)  # the first of 2 local epochs: warm-up at 1e-5
    assert seen[5:] == pytest.approx([0.002 * 0.5 * (1 + math.cos(math.pi * k / 5)) for k in range(5)])
    assert seen == pytest.approx(lrs(PFedMoAP(tiny_backbone, gate_heads=2), 10, 2))  # the same recipe


def test_one_local_epoch_has_no_warm_up_and_zero_disables_it(tiny_backbone):
    cosine = [0.002 * 0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)]
    assert lrs(PromptFL(tiny_backbone), 4, 1) == pytest.approx(cosine)
    assert lrs(PromptFL(tiny_backbone, warmup_epochs=0), 8, 2) == pytest.approx(
        [0.002 * 0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(8)]
    )
    with pytest.raises(ValueError, match="hyperparameter 'warmup_epochs' must be >= 0, got -1"):  # its range
        build_method("promptfl", tiny_backbone, {"warmup_epochs": -1})


@pytest.mark.parametrize("n_ctx", [16, 4])
def test_forward_is_coops_prompt_on_the_frozen_towers(tiny_backbone, n_ctx):
    """logits = exp(logit_scale) * cos(image feature, text feature of "[SOS] ctx {name}."), the
    text and image features computed from CLIP's raw modules (tests/clip_reference.py)."""
    torch.manual_seed(0)
    method = build_method("promptfl", tiny_backbone, {"n_ctx": n_ctx})
    names = ["texture_a", "texture_b", "texture_c"]
    images = torch.randn(2, 3, 32, 32)
    model = tiny_backbone.model
    with torch.no_grad():
        image = ref.normalize(ref.image_features(model, images))
        text = ref.normalize(ref.coop_text_features(model, names, method.ctx))
        expected = model.logit_scale.exp() * image @ text.t()
    logits = method.logits(images, names)
    torch.testing.assert_close(logits.detach(), expected, atol=1e-5, rtol=0)
    torch.nn.functional.cross_entropy(logits, torch.tensor([0, 2])).backward()
    ref.grads_only_in(method, {"ctx"})  # only the context learns
