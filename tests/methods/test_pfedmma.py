"""pFedMMA: parameter counts on the real architectures, the adapted block computation,
the gradient scaling, the range validation and what a federated round shares."""

from __future__ import annotations

import copy
import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, tiny_config

from benchmark.backbone import load_backbone
from benchmark.registry import build_method
from benchmark.runs.runner import run_experiment
from methods.pfedmma import PFedMMA

TOWERS = ("text", "vision")
PERSONAL = ("text_down", "text_up", "vision_down", "vision_up")


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


@pytest.fixture(scope="module")
def vit_b32():
    return load_backbone("ViT-B-32", None)


def expected_counts(text_width, vision_width, blocks, a=32, s=32):
    """Written from the spec: text down/up, vision down/up, one shared Linear per block."""
    per_block = (text_width * a + a) + (s * text_width + text_width)
    per_block += (vision_width * a + a) + (s * vision_width + vision_width)
    shared = a * s + s
    return (per_block + shared) * blocks, shared * blocks


def reference_adapter(method, tower, block, h):
    """The unscaled adapter from the raw weights: up(relu(shared(relu(down(h)))))."""
    state = method.state_dict()
    w = lambda name: (state[f"{name}.{block}.weight"], state[f"{name}.{block}.bias"])  # noqa: E731
    z = F.relu(F.linear(h, *w(f"{tower}_down")))
    z = F.relu(F.linear(z, *w("shared")))
    return F.linear(z, *w(f"{tower}_up"))


# -- counts ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["vit_b16", "vit_b32"])
def test_counts_on_the_real_architectures(name, request):
    backbone = request.getfixturevalue(name)
    method = build_method("pfedmma", backbone)
    assert (backbone.text.width, backbone.vision.width, backbone.text.blocks, backbone.vision.blocks) == (
        512,
        768,
        12,
        12,
    )
    assert method.parameter_counts() == {"trainable_params": 674_560, "uploaded_params": 8_448}
    assert expected_counts(512, 768, 8) == (674_560, 8_448)
    assert sorted(method.uploaded_state()) == sorted(
        f"shared.{b}.{p}" for b in range(5, 13) for p in ("weight", "bias")
    )
    # Init: kaiming-normal (fan_out, relu) on every Linear, up included; zero biases.
    for key, value in method.state_dict().items():
        if key.endswith(".bias"):
            assert torch.count_nonzero(value) == 0, key
    up = method.vision_up["7"].weight  # [768, 32]: fan_out = 768
    down = method.vision_down["7"].weight  # [32, 768]: fan_out = 32
    assert up.std().item() == pytest.approx(math.sqrt(2 / 768), rel=0.05)
    assert down.std().item() == pytest.approx(math.sqrt(2 / 32), rel=0.05)


def test_describe_prints_the_counts(vit_b16, capsys):
    from benchmark.cli import main

    assert main(["methods", "--describe", "pfedmma", "--backbone", "ViT-B-16"]) == 0
    out = capsys.readouterr().out
    assert "674,560 trainable parameters, 8,448 uploaded" in out
    uploaded = next(line for line in out.splitlines() if line.startswith("uploaded state"))
    personal = next(line for line in out.splitlines() if line.startswith("personal state"))
    assert "shared.10.bias" in uploaded and "_down" not in uploaded and "_up." not in uploaded
    assert "text_down.10.bias" in personal and "shared" not in personal
    assert "--first-block int | 'auto' = 'auto'  (>= 1)" in out and "--alpha float = 0.001  (> 0)" in out
    assert "--federate str = 'shared'" in out


def test_other_depths_and_a_clear_range_error(tiny_backbone):
    # ViT-L-14's shapes (text 12 x 768, vision 24 x 1024): the range pairs blocks of the same index.
    vit_l = SimpleNamespace(
        name="ViT-L-14", text=SimpleNamespace(width=768, blocks=12), vision=SimpleNamespace(width=1024, blocks=24)
    )
    method = PFedMMA(vit_l)
    assert method.block_numbers == list(range(5, 13))
    trainable, uploaded = expected_counts(768, 1024, 8)
    assert method.parameter_counts() == {"trainable_params": trainable, "uploaded_params": uploaded}
    assert PFedMMA(vit_l, first_block=1, last_block=3).block_numbers == [1, 2, 3]
    with pytest.raises(ValueError, match=r"'ViT-L-14'.*text tower 12 blocks, vision tower 24.*1\.\.12"):
        PFedMMA(vit_l, first_block=13, last_block=24)

    with pytest.raises(ValueError, match=r"'fedbench-tiny-vit'.*text tower 4 blocks.*1\.\.4"):
        build_method("pfedmma", tiny_backbone, {"first_block": 5})  # the paper's 5..12 does not fit 4 blocks
    for bad in ({"first_block": 2, "last_block": 5}, {"first_block": 3, "last_block": 2}):
        with pytest.raises(ValueError, match="fedbench-tiny-vit"):
            build_method("pfedmma", tiny_backbone, bad)
    with pytest.raises(ValueError, match="'first_block' must be >= 1, got 0"):
        build_method("pfedmma", tiny_backbone, {"first_block": 0})
    method = build_method("pfedmma", tiny_backbone, {"first_block": 2, "last_block": 3})
    assert all(set(method.block_wrappers(t)) == {1, 2} for t in TOWERS)  # 0-based indices
    assert build_method("pfedmma", tiny_backbone, {"first_block": 4}).block_numbers == [4]
    with pytest.raises(ValueError, match="federate"):
        build_method("pfedmma", tiny_backbone, {"first_block": 2, "federate": "everything"})


@pytest.mark.parametrize(
    ("text", "vision", "blocks"),
    # The paper: the top 8 of ViT-B/16's 12 blocks. The toy and tiny CLIPs: 4 blocks, top 3.
    # ViT-L-14: the text tower's 12 bound the range. 24 and 24: the top 16.
    [(12, 12, range(5, 13)), (4, 4, range(2, 5)), (12, 24, range(5, 13)), (24, 24, range(9, 25)), (1, 1, [1])],
)
def test_first_block_auto_adapts_the_top_two_thirds(text, vision, blocks):
    shape = SimpleNamespace(
        name="x", text=SimpleNamespace(width=64, blocks=text), vision=SimpleNamespace(width=64, blocks=vision)
    )
    assert PFedMMA(shape).block_numbers == list(blocks)
    assert PFedMMA.fit_to_backbone(shape, {"first_block": "auto", "last_block": 0})["first_block"] == blocks[0]


def test_auto_is_resolved_from_the_backbone_config_and_recorded(tmp_path, capsys):
    from benchmark.cli import main
    from benchmark.registry import fit_method_args_to

    # The shape is read from open_clip's config: no weights, nothing built.
    assert fit_method_args_to("pfedmma", {}, "ViT-B-16")["first_block"] == 5
    assert fit_method_args_to("pfedmma", {}, "fedbench-toy-vit")["first_block"] == 2
    assert fit_method_args_to("pfedmma", {"first_block": "auto"}, "ViT-L-14")["first_block"] == 5
    assert fit_method_args_to("pfedmma", {"first_block": 3}, "ViT-B-16")["first_block"] == 3
    # An explicit 2 and `auto` on the toy CLIP are one cell (the toy presets pass 2).
    from benchmark.config import RunConfig
    from benchmark.runs.identity import cell_hash

    auto = RunConfig(method="pfedmma")
    assert cell_hash(auto) == cell_hash(RunConfig(method="pfedmma", method_args={"first_block": 2}))
    assert cell_hash(auto) != cell_hash(RunConfig(method="pfedmma", method_args={"first_block": 3}))

    assert main(["run", "--method", "pfedmma", "--first-block", "auto", "--print-config"]) == 0
    assert "  first_block: 2\n" in capsys.readouterr().out
    argv = ["run", "--method", "pfedmma", "--backbone", "ViT-B-16", "--pretrained", "none", "--print-config"]
    assert main(argv) == 0
    assert "  first_block: 5\n" in capsys.readouterr().out


def test_a_block_range_that_does_not_fit_fails_before_anything_is_built(tmp_path, capsys, monkeypatch):
    import benchmark.runs.preparation as preparation
    from benchmark.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError("the backbone was built before the block range was checked")

    monkeypatch.setattr(preparation, "load_backbone", refuse)
    out = tmp_path / "runs"
    argv = ["run", "--method", "pfedmma", "--first-block", "4", "--last-block", "6", "--out", str(out)]
    assert main([*argv, "--wandb", "disabled"]) == 2
    err = capsys.readouterr().err
    assert "adapted blocks 4..6 do not fit backbone 'fedbench-toy-vit'" in err and "1..4" in err
    assert not out.exists()


# -- computation -------------------------------------------------------------------------
@pytest.mark.parametrize("tower", TOWERS)
def test_forward_adds_the_scaled_adapter_and_leaves_other_blocks_alone(tiny_backbone, tower):
    torch.manual_seed(0)
    method = build_method("pfedmma", tiny_backbone, {"first_block": 2, "last_block": 3, "alpha": 0.5})
    model = tiny_backbone.model
    blocks = tiny_backbone.blocks(tower)
    mask = model.attn_mask if tower == "text" else None
    width = blocks[0].ln_1.normalized_shape[0]
    x = torch.randn(3, 7 if tower == "vision" else model.attn_mask.shape[0], width)
    with torch.no_grad():
        # One block: block(x) + alpha * adapter(ln_1(x)), with the block's own ln_1.
        got = method.block_wrappers(tower)[1](blocks[1], x, mask)
        want = blocks[1](x, attn_mask=mask) + 0.5 * reference_adapter(method, tower, 2, blocks[1].ln_1(x))
        torch.testing.assert_close(got, want)
        assert not torch.allclose(got, blocks[1](x, attn_mask=mask))

        # The whole tower, written out: blocks 1 and 4 (1-based) are the plain blocks.
        def run_blocks(h):
            h_in = h
            for i, block in enumerate(blocks):
                out = block(h_in, attn_mask=mask)
                if i in (1, 2):
                    out = out + 0.5 * reference_adapter(method, tower, i + 1, block.ln_1(h_in))
                h_in = out
            return h_in

        if tower == "vision":
            images = torch.randn(2, 3, tiny_backbone.image_size, tiny_backbone.image_size)
            h = run_blocks(model.visual._embeds(images))
            want = F.normalize(model.visual.ln_post(h)[:, 0] @ model.visual.proj, dim=-1)
            torch.testing.assert_close(method.encode_images(images), want)
        else:
            names = ["texture_a", "texture_b"]
            tokens = tiny_backbone.tokenize([f"a photo of a {n}." for n in names])
            h = run_blocks(model.token_embedding(tokens) + model.positional_embedding)
            h = model.ln_final(h)[torch.arange(2), tokens.argmax(-1)] @ model.text_projection
            torch.testing.assert_close(method.encode_classes(names), F.normalize(h, dim=-1))


def test_every_adapter_trains_and_the_backbone_stays_frozen(tiny_backbone):
    method = build_method("pfedmma", tiny_backbone, {"first_block": 2})
    assert not method.frozen_image_features  # image features depend on the client's adapters
    images = torch.randn(4, 3, tiny_backbone.image_size, tiny_backbone.image_size)
    F.cross_entropy(method.logits(images, ["a", "b", "c"]), torch.tensor([0, 1, 2, 0])).backward()
    for key, p in method.named_parameters():  # shared layers get gradient from both towers' paths
        assert p.grad is not None and p.grad.abs().sum() > 0, key
    assert all(p.grad is None and not p.requires_grad for p in tiny_backbone.parameters())
    optimizer = method.configure_optimizers()
    assert isinstance(optimizer, torch.optim.SGD)  # constant lr: no scheduler
    assert {k: optimizer.defaults[k] for k in ("lr", "momentum", "weight_decay")} == {
        "lr": 0.001,
        "momentum": 0.9,
        "weight_decay": 5e-4,
    }


@pytest.mark.parametrize("alpha", [0.001, 0.25])
@pytest.mark.parametrize("tower", TOWERS)
def test_gradient_scaling_against_the_unscaled_adapter(tiny_backbone, tower, alpha):
    """Parameters get exactly 1/alpha times their true gradient; x gets its true gradient."""
    torch.manual_seed(1)
    method = build_method("pfedmma", tiny_backbone, {"first_block": 3, "alpha": alpha}).double()
    block = copy.deepcopy(tiny_backbone.blocks(tower)[2]).double()  # a private float64 copy
    x = torch.randn(2, 5, block.ln_1.normalized_shape[0], dtype=torch.float64)
    weights = torch.randn(2, 5, x.shape[-1], dtype=torch.float64)  # a loss that mixes every output

    # The method's wrapped block.
    x_scaled = x.clone().requires_grad_(True)
    out = method.block_wrappers(tower)[2](block, x_scaled, None)
    (out * weights).sum().backward()
    keys = [f"{name}.3.{p}" for name in (f"{tower}_down", "shared", f"{tower}_up") for p in ("weight", "bias")]
    params = dict(method.named_parameters())
    scaled = {k: params[k].grad for k in keys}

    # Plain autograd through copies of the same weights, no scaling anywhere.
    leaves = {k: params[k].detach().clone().requires_grad_(True) for k in keys}
    x_true = x.clone().requires_grad_(True)
    tw = lambda name: (leaves[f"{name}.3.weight"], leaves[f"{name}.3.bias"])  # noqa: E731
    h = block.ln_1(x_true)
    y = F.linear(F.relu(F.linear(F.relu(F.linear(h, *tw(f"{tower}_down"))), *tw("shared"))), *tw(f"{tower}_up"))
    out_true = block(x_true, attn_mask=None) + alpha * y
    (out_true * weights).sum().backward()

    torch.testing.assert_close(out, out_true, rtol=0, atol=0)  # identity forward
    torch.testing.assert_close(x_scaled.grad, x_true.grad, rtol=1e-12, atol=1e-12)
    for key in keys:
        assert leaves[key].grad.abs().max() > 0, key
        torch.testing.assert_close(scaled[key], leaves[key].grad / alpha, rtol=1e-10, atol=1e-12)
    # Only this tower's down/up and the shared layer of block 3 took part.
    other = "vision" if tower == "text" else "text"
    assert all(p.grad is None for k, p in params.items() if k.startswith(other) or ".4." in k)


# -- federation --------------------------------------------------------------------------
def _run(fake_data_root, tmp_path, federate, rounds=2, clients=3):
    config = tiny_config(
        fake_data_root,
        tmp_path,
        method="pfedmma",
        rounds=rounds,
        clients=clients,
        shots=2,
        method_args={"first_block": 3, "federate": federate, "lr": 0.01},
    )
    return run_experiment(config, write=False, progress=False)


def _same(states, predicate):
    first = states[0]
    return all(torch.equal(s[k], first[k]) for s in states[1:] for k in first if predicate(k))


def test_a_round_shares_the_shared_projections_only(fake_data_root, tmp_path):
    result = _run(fake_data_root, tmp_path, "shared")
    states = list(result.federation.client_states.values())
    assert len(states) == 3
    initial = build_method("pfedmma", load_backbone(TINY, None), {"first_block": 3}).client_state()
    shared_keys = sorted(k for k in initial if k.startswith("shared."))
    assert shared_keys == ["shared.3.bias", "shared.3.weight", "shared.4.bias", "shared.4.weight"]
    # Every client holds the same shared projections (and they trained) ...
    assert _same(states, lambda k: k.startswith("shared."))
    assert not torch.equal(states[0]["shared.3.weight"], initial["shared.3.weight"])
    # ... and its own down/up, different from every other client's.
    for key in ("text_down.3.weight", "text_up.4.weight", "vision_down.4.weight", "vision_up.3.weight"):
        for i in range(3):
            for j in range(i + 1, 3):
                assert not torch.allclose(states[i][key], states[j][key]), (key, i, j)
    method = build_method("pfedmma", load_backbone(TINY, None), {"first_block": 3})
    method.load_client_state(states[2])
    assert sorted(method.uploaded_state()) == shared_keys
    uploaded = method.parameter_counts()["uploaded_params"]
    assert uploaded == 2 * (32 * 32 + 32)
    assert result.summary["uploaded_params"] == uploaded
    assert result.summary["bytes_up_per_round"] == [uploaded * 4 * 3] * 2
    assert result.summary["bytes_down_per_round"] == [0, uploaded * 4 * 3]


def test_ablations_federate_all_and_none(fake_data_root, tmp_path):
    everything = _run(fake_data_root, tmp_path, "all", rounds=1, clients=2)
    states = list(everything.federation.client_states.values())
    assert _same(states, lambda k: True)
    assert everything.summary["uploaded_params"] == everything.summary["trainable_params"]
    local = _run(fake_data_root, tmp_path, "none", rounds=1, clients=2)
    states = list(local.federation.client_states.values())
    assert local.summary["uploaded_params"] == 0 and local.summary["bytes_up_per_round"] == [0]
    assert not torch.allclose(states[0]["shared.3.weight"], states[1]["shared.3.weight"])


def test_cli_run_trains_end_to_end_and_reports_the_bytes_sent(fake_data_root, tmp_path, capsys):
    from benchmark.cli import main

    out = tmp_path / "runs"
    code = main(
        [
            "run",
            "--method",
            "pfedmma",
            "--dataset",
            "dtd",
            "--backbone",
            TINY,
            "--pretrained",
            "none",
            "--data-root",
            str(fake_data_root),
            "--out",
            str(out),
            "--shots",
            "2",
            "--local-epochs",
            "1",
            "--clients",
            "2",
            "--first-block",
            "2",
            "--rounds",
            "1",
            "--wandb",
            "disabled",
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    assert "| pfedmma" in printed.out
    (summary_file,) = out.glob("pfedmma_*/summary.json")
    run_dir = summary_file.parent
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["uploaded_params"] == 3 * (32 * 32 + 32)  # blocks 2..4 of the tiny backbone
    assert summary["trainable_params"] == expected_counts(64, 64, 3)[0]
    assert summary["bytes_up_per_round"] == [summary["uploaded_params"] * 4 * 2]  # fp32, 2 clients
    assert "first_block: 2" in (run_dir / "config.yaml").read_text()
