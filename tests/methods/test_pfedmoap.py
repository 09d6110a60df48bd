"""pFedMoAP: the gate against a direct computation, expert selection by client id,
the download and its bytes, what is uploaded, counts on ViT-B/16, an end-to-end run."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import clip_reference as ref
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config, write_split_zhou

from benchmark.backbone import load_backbone
from benchmark.method import state_bytes
from benchmark.registry import build_method
from benchmark.runs.runner import run_experiment
from methods.pfedmoap import MoAPClassFeatures, PFedMoAP

NAMES = ["red circle", "blue square", "green star"]


def seeded(backbone, seed: int = 0, **kwargs) -> PFedMoAP:
    torch.manual_seed(seed)
    return PFedMoAP(backbone, **kwargs)


def bank_of(ctxs: dict[int, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    return {cid: {"ctx": ctx} for cid, ctx in ctxs.items()}


@pytest.fixture(scope="module")
def data_for_four_clients(tmp_path_factory):
    # 16 classes -> 8 base classes, 2 per client for 4 clients.
    return write_split_zhou(tmp_path_factory.mktemp("moap_data"), num_classes=16)


@pytest.fixture(scope="module")
def vit_b16():
    return load_backbone("ViT-B-16", None)


def test_without_experts_the_logits_are_the_local_logits(tiny_backbone):
    method = seeded(tiny_backbone)
    assert int(method.expert_count) == 0
    images = torch.randn(4, 3, 32, 32)
    expected = reference_local_logits(method, images)
    logits = method.logits(images, NAMES)
    assert torch.allclose(logits, expected, atol=1e-5)
    logits.sum().backward()
    assert all(p.grad is None for p in method.gate.parameters())  # the gate is not used yet
    assert method.ctx.grad is not None


def test_gate_equals_a_direct_computation(tiny_backbone):
    # Tiny: D = 32, pool ::4 -> d = 8; 2 heads of dim 4 so the head split matters.
    method = seeded(tiny_backbone, gate_heads=2)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in method.gate.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    B, C, n, D = 3, 4, 2, 32
    img = F.normalize(torch.randn(B, D), dim=-1)
    local = F.normalize(torch.randn(C, D), dim=-1)
    experts = torch.randn(n, C, 8)
    logits = method.classify(img, MoAPClassFeatures(local, experts))

    gate, s = method.gate, tiny_backbone.logit_scale
    expected = torch.empty(B, C)
    for b in range(B):
        query = img[b, ::4]
        for c in range(C):
            keys = [local[c, ::4]] + [experts[e, c] for e in range(n)]
            q = gate.q.weight @ query + gate.q.bias
            ks = [gate.k.weight @ key + gate.k.bias for key in keys]
            vs = [gate.v.weight @ key + gate.v.bias for key in keys]
            heads = []
            for h in range(2):
                part = slice(4 * h, 4 * h + 4)
                scores = torch.stack([10.0 * (q[part] @ k[part]) for k in ks])
                weights = torch.exp(scores - scores.max()) / torch.exp(scores - scores.max()).sum()
                heads.append(sum(w * v[part] for w, v in zip(weights, vs)))
            mixed = gate.out.weight @ torch.cat(heads) + gate.out.bias
            expected[b, c] = 0.5 * s * (img[b] @ local[c]) + s * (query @ mixed)
    assert torch.allclose(logits, expected.detach(), atol=1e-4)


def test_nearest_selection_returns_client_ids_beyond_ten_clients(tiny_backbone):
    method = seeded(tiny_backbone)  # K - 1 = 9 experts
    own = torch.zeros(16, 64)
    # Distance of client j's prompt to client 3's previous prompt: every entry offset by
    # d / sqrt(16 * 64), so the L2 distance is exactly d.
    distances = {0: 5.0, 1: 9.0, 2: 1.0, 4: 12.0, 5: 3.0, 6: 2.0, 7: 11.0, 8: 4.0, 9: 6.0, 10: 0.5, 11: 7.0}
    ctxs = {cid: own + d / math.sqrt(own.numel()) for cid, d in distances.items()}
    ctxs[3] = own
    # Insertion order unrelated to ids, so list positions and ids differ.
    order = [11, 3, 7, 0, 10, 5, 2, 9, 1, 6, 4, 8]
    bank = bank_of({cid: ctxs[cid] for cid in order})
    expected = [10, 2, 6, 5, 8, 0, 9, 11, 1]  # the 9 smallest distances, nearest first
    assert method.select_experts(3, bank) == expected
    received = method.download(3, {"ctx": torch.ones(16, 64)}, bank)
    for row, cid in enumerate(expected):
        assert torch.equal(received["experts"][row], ctxs[cid])
    # A client with no previous prompt (first participation) gets no experts.
    del bank[3]
    assert method.select_experts(3, bank) == []


def test_random_selection_is_deterministic_and_excludes_self(tiny_backbone):
    ctxs = {cid: torch.randn(16, 64) for cid in range(12)}
    bank = bank_of(ctxs)
    first = seeded(tiny_backbone, seed=5, selection="random")
    again = seeded(tiny_backbone, seed=5, selection="random")
    picks = {cid: first.select_experts(cid, bank) for cid in range(12)}
    for cid, chosen in picks.items():
        assert cid not in chosen
        assert len(chosen) == len(set(chosen)) == 9
        assert set(chosen) <= set(range(12))
        assert chosen == first.select_experts(cid, bank) == again.select_experts(cid, bank)
    other_seed = seeded(tiny_backbone, seed=6, selection="random")
    assert picks != {cid: other_seed.select_experts(cid, bank) for cid in range(12)}
    # Fewer candidates than K - 1: all of them.
    small = bank_of({cid: ctxs[cid] for cid in (0, 4, 7)})
    assert sorted(first.select_experts(4, small)) == [0, 7]


def test_download_contents_bytes_and_use(tiny_backbone):
    method = seeded(tiny_backbone)
    W, n_ctx = 64, 16
    ctxs = {cid: torch.randn(n_ctx, W) * 0.02 for cid in (0, 1, 2, 5)}
    average = torch.randn(n_ctx, W) * 0.02
    received = method.download(5, {"ctx": average}, bank_of(ctxs))
    assert set(received) == {"ctx", "experts", "expert_count"}
    assert torch.equal(received["ctx"], average)
    assert int(received["expert_count"]) == 3
    assert sorted(method.select_experts(5, bank_of(ctxs))) == [0, 1, 2]
    assert received["experts"].shape == (9, n_ctx, W)
    assert received["experts"][3:].abs().sum() == 0
    # The FedAvg prompt + the whole fixed-size expert buffer (fp32) + one int64 count.
    assert state_bytes(received) == (1 + 9) * n_ctx * W * 4 + 8

    images = torch.randn(2, 3, 32, 32)
    method.load_client_state(received)
    assert torch.equal(method.ctx.detach(), average)
    features = method.encode_classes(NAMES)
    model = tiny_backbone.model
    with torch.no_grad():
        for row in range(3):  # each expert's class features, pooled to every 4th dimension
            direct = ref.normalize(ref.coop_text_features(model, NAMES, received["experts"][row]))[:, ::4]
            torch.testing.assert_close(features.experts[row], direct, atol=1e-6, rtol=0)
        assert not torch.allclose(method.logits(images, NAMES), reference_local_logits(method, images), atol=1e-3)

    # First participation: the FedAvg prompt and no experts.
    first = method.download(8, {"ctx": average}, bank_of(ctxs))
    assert int(first["expert_count"]) == 0 and first["experts"].abs().sum() == 0
    method.load_client_state(first)
    with torch.no_grad():
        assert torch.allclose(method.logits(images, NAMES), reference_local_logits(method, images), atol=1e-5)


def reference_local_logits(method: PFedMoAP, images: torch.Tensor) -> torch.Tensor:
    """CoOp's logits for the local prompt alone, from CLIP's raw modules (tests/clip_reference.py):
    exp(logit_scale) * cos(image feature, text feature of "[SOS] ctx {name}.")."""
    model = method.backbone.model
    image = ref.normalize(ref.image_features(model, images))
    text = ref.normalize(ref.coop_text_features(model, NAMES, method.ctx))
    return model.logit_scale.exp() * image @ text.t()


def test_uploaded_and_personal_state(tiny_backbone):
    method = seeded(tiny_backbone)
    state = method.client_state()
    gate = {f"gate.{p}.{w}" for p in ("q", "k", "v", "out") for w in ("weight", "bias")}
    assert set(state) == {"ctx", "experts", "expert_count"} | gate
    assert set(method.uploaded_state()) == {"ctx"}
    downloaded = set(method.download(0, {"ctx": method.ctx.detach()}, {}))
    assert set(state) - downloaded - {"ctx"} == gate  # the gate never leaves the client


def test_optimizer_groups_and_schedules(tiny_backbone):
    method = seeded(tiny_backbone)
    method._trainer = SimpleNamespace(estimated_stepping_batches=10, max_epochs=2)
    config = method.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    assert [len(g["params"]) for g in optimizer.param_groups] == [1, 8]
    assert optimizer.param_groups[0]["params"][0] is method.ctx
    prompt_lrs, gate_lrs = [], []
    for _ in range(10):
        prompt_lrs.append(optimizer.param_groups[0]["lr"])
        gate_lrs.append(optimizer.param_groups[1]["lr"])
        optimizer.step()
        scheduler.step()
    assert prompt_lrs[:5] == pytest.approx([1e-5] * 5)  # first of 2 epochs: warm-up
    assert prompt_lrs[5:] == pytest.approx([0.002 * 0.5 * (1 + math.cos(math.pi * k / 5)) for k in range(5)])
    assert gate_lrs == pytest.approx([0.01] * 10)
    # One local epoch: no warm-up (it would leave the prompt at 1e-5 all round).
    method._trainer = SimpleNamespace(estimated_stepping_batches=4, max_epochs=1)
    assert method.configure_optimizers()["optimizer"].param_groups[0]["lr"] == pytest.approx(0.002)


def test_bad_gate_shapes_are_refused(tiny_backbone):
    with pytest.raises(ValueError, match="gate_heads"):
        PFedMoAP(tiny_backbone, gate_heads=3)
    with pytest.raises(ValueError, match="pool_stride"):
        PFedMoAP(tiny_backbone, pool_stride=5)
    with pytest.raises(ValueError, match="hyperparameter 'selection' must be one of 'nearest', 'random'"):
        build_method("pfedmoap", tiny_backbone, {"selection": "farthest"})


def test_parameter_counts_on_vit_b16(vit_b16):
    method = PFedMoAP(vit_b16)
    gate = sum(p.numel() for p in method.gate.parameters())
    assert method.ctx.numel() == 16 * 512 == 8_192
    assert gate == 4 * (128 * 128 + 128) == 66_048
    assert method.parameter_counts() == {"trainable_params": 74_240, "uploaded_params": 8_192}
    assert method.experts.shape == (9, 16, 512)


def test_run_experiment_downloads_experts(data_for_four_clients, tmp_path):
    config = tiny_config(data_for_four_clients, tmp_path, method="pfedmoap", rounds=3, clients=4)
    result = run_experiment(config, progress=False)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["trainable_params"] == 16 * 64 + 4 * (8 * 8 + 8)
    assert summary["uploaded_params"] == 16 * 64
    # Round 1 downloads nothing; rounds 2 and 3: 4 clients x (prompt + 9 expert slots + count).
    per_client = 10 * 16 * 64 * 4 + 8
    assert summary["bytes_down_per_round"] == [0, 4 * per_client, 4 * per_client]
    assert summary["bytes_up_per_round"] == [4 * 16 * 64 * 4] * 3
    states = result.federation.client_states
    initial_gate = seeded_gate(config)
    for cid, state in states.items():
        assert int(state["expert_count"]) == 3
        assert not torch.equal(state["gate.q.weight"], initial_gate)  # the gate trained
    # Evaluated after local training: each client keeps its own trained prompt.
    assert not torch.equal(states[0]["ctx"], states[1]["ctx"])
    assert 0.0 <= summary["metrics"]["HM"] <= 100.0


def seeded_gate(config) -> torch.Tensor:
    from benchmark.runs.preparation import build_seeded_method

    method = build_seeded_method(config, load_backbone(config.backbone, None))
    return method.gate.q.weight.detach()


def test_every_client_is_scored_as_its_own_training_left_it_even_when_absent_from_the_last_round(
    data_for_four_clients, tmp_path, monkeypatch
):
    """docs/methods.md: pFedMoAP is scored before the broadcast (`evaluate_after_download =
    False`): every client -- those the last round did not sample too -- is evaluated with
    the prompt, gate and experts its last local training left, not with a final download."""
    import benchmark.runs.recording as recording
    from benchmark.federation.simulator import FederatedSimulator

    trained: dict[int, tuple[int, dict[str, torch.Tensor]]] = {}  # client -> (round, state its training left)
    real_round = FederatedSimulator.client_round

    def recording_round(self, cid, round_index, state, received):
        done = real_round(self, cid, round_index, state, received)
        trained[cid] = (round_index + 1, {k: v.clone() for k, v in done.state.items()})
        return done

    scored: list[dict[int, dict[str, torch.Tensor]]] = []  # the states each evaluation scores
    real_evaluate = recording.evaluate_clients

    def recording_evaluate(evaluator, protocol, dataset, partition, client_states, *args, **kwargs):
        scored.append({cid: {k: v.clone() for k, v in s.items()} for cid, s in client_states.items()})
        return real_evaluate(evaluator, protocol, dataset, partition, client_states, *args, **kwargs)

    monkeypatch.setattr(FederatedSimulator, "client_round", recording_round)
    monkeypatch.setattr(recording, "evaluate_clients", recording_evaluate)
    # The authors' sampling: round 1 trains all 4 clients, rounds 2 and 3 int(0.5 x 4) = 2 each.
    config = tiny_config(
        data_for_four_clients, tmp_path, method="pfedmoap", rounds=3, clients=4, participation=0.5, eval_every=3
    )
    result = run_experiment(config, write=False, progress=False)
    last_round = [cid for cid, (round_number, _) in trained.items() if round_number == 3]
    absent = [cid for cid, (round_number, _) in trained.items() if round_number < 3]
    assert len(last_round) == 2 and len(absent) == 2 and sorted(trained) == [0, 1, 2, 3]
    final = scored[-1]  # the last round's evaluation: the reported numbers
    assert sorted(final) == [0, 1, 2, 3]
    for cid, (_, state) in trained.items():
        assert set(final[cid]) == set(state)
        for key, value in state.items():
            assert torch.equal(final[cid][key], value), (cid, key)
    assert result.federation.final_download_bytes == 0  # no client received a download to be scored with
