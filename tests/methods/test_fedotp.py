"""FedOTP: the unbalanced OT plan, the transport logits, precision, state split and counts.

References are written here independently: a plain float64 numpy loop of the spec's
iteration with the literal kernel K = exp(-cost / eps).
"""

from __future__ import annotations

import json

import clip_reference as ref
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark import host_values
from benchmark.backbone import load_backbone
from benchmark.federation.features import FeatureCache
from benchmark.method import ClientUpdate
from benchmark.registry import build_method
from benchmark.runs.preparation import load_run_dataset
from benchmark.runs.runner import run_experiment
from methods import fedotp
from methods.fedotp import sinkhorn_plan, transport_logits, unbalanced_ot_plan


def reference_plan(cost: np.ndarray, top_percent: float, eps: float, thresh: float, max_iter: int, ot: str = "COT"):
    """The spec's iteration, literally, in float64, for a batch of costs [P, M, N]."""
    P, M, N = cost.shape
    K = np.exp(-cost / eps)
    a = np.full((P, M), 1.0 / M)
    b = np.full((P, N), (1.0 if ot == "sinkhorn" else top_percent) / N)
    u, v = np.ones((P, M)), np.ones((P, N))
    for _ in range(max_iter):
        u_prev, v_prev = u, v
        Kv = np.einsum("pmn,pn->pm", K, v)
        u = a / Kv if ot == "sinkhorn" else np.minimum(a / Kv, 1.0)
        v = b / np.einsum("pmn,pm->pn", K, u)
        change = np.abs(u - u_prev).mean() if ot == "sinkhorn" else np.abs(v - v_prev).mean()
        if change < thresh:
            break
    return u[:, :, None] * K * v[:, None, :]


def hand_made_case():
    """2 images x 3 patches, 2 classes x 2 prompts, D = 3: sims between 0.2 and 0.99."""
    patches = torch.tensor(
        [
            [[1.0, 0.2, 0.0], [0.3, 1.0, 0.1], [0.5, 0.5, 0.6]],
            [[0.1, 0.9, 0.4], [1.0, 0.1, 0.3], [0.2, 0.3, 1.0]],
        ]
    )
    prompts = torch.tensor(  # [N = 2 prompts, C = 2 classes, D]
        [
            [[1.0, 0.3, 0.2], [0.2, 1.0, 0.3]],
            [[0.6, 0.4, 0.7], [0.3, 0.4, 1.0]],
        ]
    )
    return F.normalize(patches, dim=-1), F.normalize(prompts, dim=-1)


def loop_logits(patches: np.ndarray, prompts: np.ndarray, scale: float, **ot) -> np.ndarray:
    """logit[b, c] = scale * sum_mn T_mn sim_mn, one (image, class) pair at a time."""
    B, C = patches.shape[0], prompts.shape[1]
    out = np.zeros((B, C))
    for i in range(B):
        for c in range(C):
            sim = np.array(
                [[patches[i, m] @ prompts[n, c] for n in range(prompts.shape[0])] for m in range(len(patches[i]))]
            )
            plan = reference_plan((1.0 - sim)[None], **ot)[0]
            out[i, c] = scale * (plan * sim).sum()
    return out


OT_DEFAULTS = dict(top_percent=0.8, eps=0.01, thresh=1e-3, max_iter=100)


def test_cot_plan_columns_sum_to_b_and_rows_stay_within_a():
    torch.manual_seed(0)
    M, N = 7, 2
    cost = 1.0 - torch.empty(5, M, N).uniform_(0.1, 0.5)
    a, b = torch.full((5, M), 1.0 / M), torch.full((5, N), 0.8 / N)
    for max_iter, row_excess in ((100, 0.10), (2000, 1e-5)):
        plan = unbalanced_ot_plan(cost, a, b, eps=0.01, max_iter=max_iter, thresh=1e-3)
        # The last update is on v: the columns carry exactly top_percent / N each.
        assert torch.allclose(plan.sum(dim=1), b, rtol=1e-5, atol=0)
        assert torch.allclose(plan.sum(dim=(1, 2)), torch.full((5,), 0.8), rtol=1e-5)
        # Rows are bounded by a only at a fixed point. The stop rule compares v at its true
        # scale (~exp(cost / eps), astronomically large) with 1e-3, so in practice it is
        # max_iter that stops: after the default 100 iterations the literal iteration (see
        # the float64 reference) leaves rows up to ~9% above a on this case; converged, 1e-5.
        assert (plan.sum(dim=2) <= a * (1 + row_excess)).all()
    assert (plan.sum(dim=2) >= 0).all()


def test_cot_plan_matches_the_literal_float64_iteration():
    torch.manual_seed(1)
    cost = 1.0 - torch.empty(4, 6, 2).uniform_(0.15, 0.6)
    a, b = torch.full((4, 6), 1 / 6), torch.full((4, 2), 0.4)
    plan = unbalanced_ot_plan(cost, a, b, eps=0.01, max_iter=100, thresh=1e-3)
    expected = reference_plan(cost.double().numpy(), **OT_DEFAULTS)
    np.testing.assert_allclose(plan.numpy(), expected, rtol=1e-4, atol=1e-9)


def test_sinkhorn_option_matches_the_literal_iteration_and_is_balanced():
    torch.manual_seed(2)
    cost = 1.0 - torch.empty(3, 5, 2).uniform_(0.2, 0.7)
    a, b = torch.full((3, 5), 0.2), torch.full((3, 2), 0.5)
    plan = sinkhorn_plan(cost, a, b, eps=0.01, max_iter=100, thresh=1e-3)
    expected = reference_plan(cost.double().numpy(), ot="sinkhorn", **OT_DEFAULTS)
    np.testing.assert_allclose(plan.numpy(), expected, rtol=1e-4, atol=1e-9)
    assert torch.allclose(plan.sum(dim=1), b, rtol=1e-5)


@pytest.mark.parametrize("solve", [unbalanced_ot_plan, sinkhorn_plan], ids=["COT", "Sinkhorn"])
@pytest.mark.parametrize("max_iter", [3, 100], ids=["cut-at-max-iter", "converges-first"])
def test_the_sync_free_stopping_gives_the_early_stop_plan_bit_for_bit(solve, max_iter, monkeypatch):
    # On CUDA the stop is decided on the device (no host read per iteration): every iteration
    # runs and the state freezes once converged. Forced here on the CPU, it must give the
    # bits the host-checked loop gives, whether the loop converges or is cut at max_iter.
    torch.manual_seed(3)
    cost = 1.0 - torch.empty(4, 6, 3).uniform_(0.15, 0.6)
    mass = 0.8 if solve is unbalanced_ot_plan else 1.0  # plain Sinkhorn converges on balanced mass
    a, b = torch.full((4, 6), 1 / 6), torch.full((4, 3), mass / 3)
    ot = dict(eps=0.5, max_iter=max_iter, thresh=1e-3)
    iterations = []
    change = fedotp._true_scale_change
    monkeypatch.setattr(fedotp, "_true_scale_change", lambda *t: iterations.append(1) or change(*t))
    host = solve(cost, a, b, **ot)
    assert (len(iterations) < max_iter) == (max_iter == 100)  # both cases are exercised
    monkeypatch.setattr(host_values, "reads_wait", lambda device: True)
    device = solve(cost, a, b, **ot)
    assert torch.equal(device, host)


def test_transport_logits_match_a_loop_reference_on_a_hand_made_case():
    patches, prompts = hand_made_case()
    logits = transport_logits(patches, prompts, logit_scale=100.0)
    expected = loop_logits(patches.double().numpy(), prompts.double().numpy(), 100.0, **OT_DEFAULTS)
    np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-4)
    assert logits.shape == (2, 2)


def test_low_cosines_that_break_the_literal_fp32_kernel_still_give_the_float64_plan():
    # cos in [-0.3, 0.05]: exp(-cost / 0.01) is below fp32's range, the literal fp32
    # iteration divides by 0; float64 still holds it, and so must the solver.
    torch.manual_seed(3)
    cost = 1.0 - torch.empty(3, 8, 2).uniform_(-0.3, 0.05)
    assert (torch.exp(-cost / 0.01) == 0).any()  # the literal fp32 kernel underflows
    a, b = torch.full((3, 8), 1 / 8), torch.full((3, 2), 0.4)
    plan = unbalanced_ot_plan(cost, a, b, eps=0.01)
    assert torch.isfinite(plan).all()
    np.testing.assert_allclose(plan.numpy(), reference_plan(cost.double().numpy(), **OT_DEFAULTS), rtol=1e-4, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_plan_is_fp32_and_finite_for_half_precision_inputs_and_under_autocast(dtype):
    patches, prompts = hand_made_case()
    expected = transport_logits(patches, prompts, 100.0)
    low = transport_logits(patches.to(dtype), prompts.to(dtype), 100.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = transport_logits(patches, prompts.to(dtype), 100.0)
    # The inputs' rounding to half precision is all that differs: the same inputs rounded, then
    # computed in fp32, give the same logits up to fp32 rounding (measured: equal).
    rounded = transport_logits(patches.to(dtype).float(), prompts.to(dtype).float(), 100.0)
    torch.testing.assert_close(low, rounded, atol=1e-4, rtol=0)
    torch.testing.assert_close(autocast, transport_logits(patches, prompts.to(dtype).float(), 100.0), atol=1e-4, rtol=0)
    for logits in (low, autocast):
        assert logits.dtype == torch.float32 and torch.isfinite(logits).all()
        # Against the unrounded inputs: logits of 73-79, measured errors at most 0.061 (bf16)
        # and 0.018 (fp16); 0.1 bounds them, far below the class gaps (2.8 and 6.0).
        assert torch.allclose(logits, expected, atol=0.1)


def test_gradient_reaches_the_prompts_through_sim_only():
    patches, prompts = hand_made_case()
    prompts = prompts.clone().requires_grad_(True)
    transport_logits(patches, prompts, 100.0).sum().backward()
    # Reference: the same sum with the plan held constant.
    fixed = prompts.detach().clone().requires_grad_(True)
    sim = torch.einsum("bmd,ncd->bcmn", patches, fixed)
    with torch.no_grad():
        plan = unbalanced_ot_plan(1.0 - sim, torch.full(sim.shape[:-1], 1 / 3), torch.full((2, 2, 2), 0.4))
    (100.0 * (plan * sim).sum()).backward()
    assert torch.allclose(prompts.grad, fixed.grad, rtol=1e-5, atol=1e-6)


def test_state_split_global_prompt_uploaded_local_prompt_personal(tiny_backbone):
    method = build_method("fedotp", tiny_backbone)
    assert set(method.client_state()) == {"global_ctx", "local_ctx"}
    assert set(method.uploaded_state()) == {"global_ctx"}
    assert method.global_ctx.shape == method.local_ctx.shape == (16, tiny_backbone.text.width)
    local_before = method.local_ctx.detach().clone()
    updates = [
        ClientUpdate(0, 10, {"global_ctx": torch.zeros(16, tiny_backbone.text.width)}),
        ClientUpdate(1, 30, {"global_ctx": torch.ones(16, tiny_backbone.text.width)}),
    ]
    method.load_client_state(method.download(0, method.aggregate(updates), {}))
    assert torch.allclose(method.global_ctx, torch.full_like(method.global_ctx, 0.75))
    assert torch.equal(method.local_ctx, local_before)


def test_class_features_are_the_global_then_the_local_prompt(tiny_backbone):
    method = build_method("fedotp", tiny_backbone)
    names = ["texture_a", "texture_b", "texture_c"]
    with torch.no_grad():
        features = method.encode_classes(names)
        # CoOp's prompt with each context, from CLIP's raw modules (tests/clip_reference.py).
        expected = [
            ref.normalize(ref.coop_text_features(tiny_backbone.model, names, ctx))
            for ctx in (method.global_ctx, method.local_ctx)
        ]
    assert features.shape == (2, 3, tiny_backbone.embed_dim)
    torch.testing.assert_close(features, torch.stack(expected), atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_counts_and_patches_on_vit_b16(vit_b16):
    method = build_method("fedotp", vit_b16)
    assert method.parameter_counts() == {"trainable_params": 2 * 16 * 512, "uploaded_params": 16 * 512}
    # M = 196 patches: a 14 x 14 grid of 16-pixel patches on 224-pixel images.
    assert tuple(vit_b16.model.visual.grid_size) == (14, 14)


def test_patch_features_are_cached_apart_from_pooled_features(tiny_backbone, fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="fedotp")
    split = load_run_dataset(config, tiny_backbone).test
    cache = FeatureCache(progress=False)
    otp, promptfl = build_method("fedotp", tiny_backbone), build_method("promptfl", tiny_backbone)
    patches = cache.features(otp, split, [0, 1])
    pooled = cache.features(promptfl, split, [0, 1])
    assert patches.shape[1:] == (16, tiny_backbone.embed_dim) and pooled.shape[1:] == (tiny_backbone.embed_dim,)
    assert torch.allclose(patches[:2].norm(dim=-1), torch.ones(2, 16), atol=1e-5)
    # Cached patches give the same logits as images (image_features passes them through).
    images = torch.stack([split[0][0], split[1][0]])
    names = ["texture_a", "texture_b"]
    with torch.no_grad():
        assert torch.allclose(otp.logits(patches[:2], names), otp.logits(images, names), atol=1e-4)


def test_run_experiment_end_to_end(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="fedotp", method_args={"max_iter": 20})
    result = run_experiment(config, progress=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    width = load_backbone("fedbench-tiny-vit", None).text.width
    assert summary["trainable_params"] == 2 * 16 * width and summary["uploaded_params"] == 16 * width
    assert summary["train_features_cached"] is True
    assert all(np.isfinite(v) for v in summary["metrics"].values())
    # Every client-round uploads the global prompt and nothing else.
    assert summary["bytes_up_per_round"][0] == 3 * 16 * width * 4


def test_ot_option_is_checked_and_sinkhorn_transports_all_mass(tiny_backbone):
    # The Literal annotation is the check: the message names the value, the choices and the fix.
    with pytest.raises(ValueError, match=r"'fedotp': hyperparameter 'ot' must be one of 'COT', 'Sinkhorn', got 'emd'"):
        build_method("fedotp", tiny_backbone, {"ot": "emd"})
    patches, prompts = hand_made_case()
    method = build_method("fedotp", tiny_backbone, {"ot": "Sinkhorn"})
    sinkhorn = method.classify(patches, prompts)
    # Balanced: the plan carries mass 1, so logits are the plan-weighted mean cosine * scale.
    expected = loop_logits(
        patches.double().numpy(), prompts.double().numpy(), tiny_backbone.logit_scale, ot="sinkhorn", **OT_DEFAULTS
    )
    np.testing.assert_allclose(sinkhorn.numpy(), expected, rtol=1e-4)
