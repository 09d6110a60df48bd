"""The FedMVP papers' baselines together: `fedbench methods --describe NAME --backbone
ViT-B-16` prints the papers' counts (trainable = uploaded: each federates all it trains),
and under mixed precision each one's logits stay fp32 and close to the fp32 ones."""

from __future__ import annotations

import pytest
import torch

from benchmark.registry import build_method

COUNTS = [
    ("fedtpg", [], 4_206_080),
    ("fedcocoop", [], 35_360),
    ("fedvpt", [], 73_728),
    ("fedmaple", [], 3_555_072),
    ("fedclip", [], 525_312),
    ("promptfl", ["--n-ctx", "4"], 2_048),
]
TINY_ARGS = {"fedtpg": {}, "fedcocoop": {}, "fedvpt": {}, "fedmaple": {"depth": 3}, "fedclip": {}}
NAMES = ["texture_a", "texture_b", "texture_c"]


@pytest.mark.parametrize("name, flags, count", COUNTS, ids=[c[0] for c in COUNTS])
def test_describe_prints_the_papers_counts(fedbench, name, flags, count):
    done = fedbench("methods", "--describe", name, "--backbone", "ViT-B-16", *flags)
    assert done.returncode == 0, done.stderr
    assert f"{count:,} trainable parameters, {count:,} uploaded per client per round" in done.stdout


@pytest.mark.parametrize("name", sorted(TINY_ARGS))
def test_logits_stay_fp32_under_bf16_autocast(tiny_backbone, name):
    torch.manual_seed(0)
    method = build_method(name, tiny_backbone, TINY_ARGS[name]).eval()
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        exact = method.logits(images, NAMES)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = method.logits(images, NAMES)
    assert mixed.dtype == torch.float32
    # bf16 matrix products inside the towers: close, not equal (the scale is ~14 on this model)
    torch.testing.assert_close(mixed, exact, rtol=0.05, atol=0.3)
