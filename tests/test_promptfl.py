"""PromptFL: the context length is a hyperparameter (the FedTPG/FedMVP papers use 4);
the default stays CoOp's 16."""

from __future__ import annotations

import pytest

from benchmark.backbone import load_backbone
from benchmark.registry import build_method


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_counts_on_vit_b16(vit_b16):
    assert build_method("promptfl", vit_b16).parameter_counts() == {"trainable_params": 8_192, "uploaded_params": 8_192}
    assert build_method("promptfl", vit_b16, {"n_ctx": 4}).parameter_counts() == {
        "trainable_params": 2_048, "uploaded_params": 2_048,
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
