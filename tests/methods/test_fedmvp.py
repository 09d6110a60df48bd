"""FedMVP: the spec's text/logit/pooling examples, the forward against an independent
computation on a tiny open_clip model, gradients, the LoRA switch, the attribute errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark.method import ClientContext
from benchmark.registry import build_method, register_method
from benchmark.runs.runner import run_experiment
from data.attributes import load_class_attributes
from methods.fedmvp import FedMVP, attribute_logits, attribute_sentence, pool_prompts

CLASSES = ["texture_a", "texture_b", "texture_c"]
DESCRIPTORS = {  # none starts with "a", "has", ... so every clause is "which has"
    "texture a": ["red colour", "striped pattern"],
    "texture b": ["blue colour", "dotted pattern"],
    "texture c": ["green colour", "plain pattern"],
}


# -- the spec's own examples (sentence builder, logit aggregation, pooling) -------------------
def test_sentence_builder_examples():
    assert (
        attribute_sentence("a photo of a", "small red striped circle", "", "red colour")
        == "a photo of a small red striped circle, which has red colour"
    )
    assert attribute_sentence("a photo of a", "dog", "", "has four legs") == "a photo of a dog, which has four legs"
    assert (
        attribute_sentence("a photo of a", "kite", "", "angular frame") == "a photo of a kite, which is angular frame"
    )
    assert (
        attribute_sentence("a photo of a", "axe", "", "used for chopping")
        == "a photo of a axe, which is used for chopping"
    )
    assert attribute_sentence("a photo of a", "cat", "", "often striped") == "a photo of a cat, which often striped"
    assert (
        attribute_sentence("a photo of a", "rose", "a type of flower, ", "red petals")
        == "a photo of a rose, a type of flower, which has red petals"
    )
    long = attribute_sentence("a photo of a", "small red striped circle", "", "x" * 100)
    assert len(long) == 77 and long.startswith("a photo of a small red striped circle, which has xxx")


def test_class_logit_is_100_times_the_mean_cosine_and_ignores_descriptor_order():
    torch.manual_seed(0)
    image = F.normalize(torch.randn(2, 8), dim=-1)
    sentences = F.normalize(torch.randn(3, 5, 8), dim=-1)
    logits = attribute_logits(image, sentences, 100.0)
    by_hand = torch.tensor(
        [[100 * sum(float(image[b] @ sentences[c, j]) for j in range(5)) / 5 for c in range(3)] for b in range(2)]
    )
    assert torch.allclose(logits, by_hand, atol=1e-4)
    shuffled = sentences[:, torch.randperm(5)]
    assert torch.allclose(attribute_logits(image, shuffled, 100.0), logits, atol=1e-5)


def test_pooling_196_tokens_gives_4_means_of_49_consecutive():
    tokens = torch.randn(2, 196, 6)
    prompts = pool_prompts(tokens, 4)
    assert prompts.shape == (2, 4, 6)
    for i in range(4):
        assert torch.allclose(prompts[:, i], tokens[:, 49 * i : 49 * (i + 1)].mean(dim=1), atol=1e-6)


# -- the forward against an independent computation ------------------------------------------
@pytest.fixture
def attributes_dir(tmp_path):
    folder = tmp_path / "attrs"
    folder.mkdir()
    (folder / "toyset.json").write_text(json.dumps(DESCRIPTORS))
    (folder / "dtd.json").write_text(
        json.dumps({f"texture {chr(ord('a') + i)}": [f"colour {i}", f"pattern {i}"] for i in range(12)})
    )
    return folder


def make_fedmvp(tiny_backbone, attributes_dir, **hparams) -> FedMVP:
    torch.manual_seed(0)
    method = build_method("fedmvp", tiny_backbone, hparams)
    method.set_class_attributes(load_class_attributes("toyset", CLASSES, attributes_dir.parent, attributes_dir))
    return method


def independent_logits(method: FedMVP, backbone, images: torch.Tensor, lora: bool) -> torch.Tensor:
    """The spec's formulas, written out with the method's weights but none of its code."""
    model, visual = backbone.model, backbone.model.visual
    sentences = [
        f"a photo of a {c.replace('_', ' ')}, which has {d}" for c in CLASSES for d in DESCRIPTORS[c.replace("_", " ")]
    ]
    with torch.no_grad():
        e = F.normalize(backbone.encode_text(backbone.tokenize(sentences)), dim=-1)  # [C*K, D]
    # X0 = [CLS; patches] + positions (before ln_pre)
    x = visual.conv1(images)  # [B, W, g, g]
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    cls = visual.class_embedding.view(1, 1, -1).repeat(x.shape[0], 1, 1)
    x0 = torch.cat([cls, x], dim=1) + visual.positional_embedding
    patches = x0[:, 1:]
    context = e @ method.text_proj.weight.t() + method.text_proj.bias  # A' [C*K, W]
    context = context.unsqueeze(0).repeat(len(images), 1, 1)
    q_in, k_in, v_in = patches, context, context
    if lora:
        lo = method.lora
        q_in = q_in + q_in @ lo.query_A @ lo.query_B
        k_in = k_in + k_in @ lo.key_A @ lo.key_B
        v_in = v_in + v_in @ lo.value_A @ lo.value_B
    pf = method.promptformer
    width, heads = patches.shape[-1], 4
    q = F.layer_norm(q_in, (width,), pf.norm.weight, pf.norm.bias)
    k = F.layer_norm(k_in, (width,), pf.norm_context.weight, pf.norm_context.bias)
    v = v_in  # the values are not normalized
    wq, wk, wv = pf.attn.in_proj_weight.split(width)
    bq, bk, bv = pf.attn.in_proj_bias.split(width)
    q, k, v = q @ wq.t() + bq, k @ wk.t() + bk, v @ wv.t() + bv

    def heads_of(t):
        return t.view(t.shape[0], t.shape[1], heads, width // heads).transpose(1, 2)

    weights = torch.softmax(heads_of(q) @ heads_of(k).transpose(-1, -2) / math.sqrt(width // heads), dim=-1)
    attended = (weights @ heads_of(v)).transpose(1, 2).reshape(q.shape)
    attended = attended @ pf.attn.out_proj.weight.t() + pf.attn.out_proj.bias
    ln, up, _, down = pf.ffn
    hidden = F.layer_norm(attended, (width,), ln.weight, ln.bias) @ up.weight.t() + up.bias
    u, g = hidden[..., : hidden.shape[-1] // 2], hidden[..., hidden.shape[-1] // 2 :]
    h = attended + (u * F.gelu(g)) @ down.weight.t() + down.bias
    groups = h.shape[1] // 4  # 16 patches on the tiny model: 4 groups of 4
    prompts = torch.stack([h[:, i * groups : (i + 1) * groups].mean(dim=1) for i in range(4)], dim=1)
    seq = visual.ln_pre(torch.cat([x0, prompts], dim=1))
    for block in visual.transformer.resblocks:
        seq = block(seq)
    feature = F.normalize(visual.ln_post(seq[:, 0]) @ visual.proj, dim=-1)
    cosines = feature @ e.t()  # [B, C*K]
    return model.logit_scale.exp() * cosines.view(len(images), len(CLASSES), -1).mean(dim=-1)


@pytest.mark.parametrize("lora", [False, True])
def test_forward_matches_the_spec_formulas(tiny_backbone, attributes_dir, lora):
    method = make_fedmvp(tiny_backbone, attributes_dir, lora_at_eval=True).eval()
    method.use_lora.fill_(lora)
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    seen = []
    hook = tiny_backbone.model.visual.ln_pre.register_forward_hook(lambda m, i, o: seen.append(i[0].shape))
    try:
        with torch.no_grad():
            logits = method.logits(images, CLASSES)
    finally:
        hook.remove()
    patches = (32 // 8) ** 2
    assert seen == [(3, 1 + patches + 4, 64)]  # [CLS; patches; 4 prompts] enters ln_pre once
    assert logits.shape == (3, len(CLASSES))
    with torch.no_grad():
        expected = independent_logits(method, tiny_backbone, images, lora)
    assert torch.allclose(logits, expected, atol=1e-4), (logits, expected)


def test_lora_branch_is_off_at_evaluation_by_default(tiny_backbone, attributes_dir):
    method = make_fedmvp(tiny_backbone, attributes_dir).eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        plain = method.logits(images, CLASSES)
        method.use_lora.fill_(True)
        assert torch.equal(method.logits(images, CLASSES), plain)
        method.train()
        assert not torch.allclose(method.logits(images, CLASSES), plain)  # training takes the branch


def test_gradients_reach_only_the_prompt_learner(tiny_backbone, attributes_dir):
    method = make_fedmvp(tiny_backbone, attributes_dir).train()
    method.set_client(ClientContext(0, 1, tuple(CLASSES), 6, 5))
    images, labels = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 0])
    method.loss(images, labels).backward()
    for name, p in method.named_parameters():
        if name.startswith("lora."):
            assert p.grad is None, name  # no LoRA branch before the switch
        else:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert all(p.grad is None for p in tiny_backbone.parameters())  # CLIP stays frozen
    method.zero_grad(set_to_none=True)
    method.use_lora.fill_(True)
    method.loss(images, labels).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in method.lora.parameters())
    assert all(p.grad is None for p in tiny_backbone.parameters())


# -- the LoRA switch, in the federation, with a controlled loss --------------------------------
TRACE: list[dict] = []
TARGETS: dict[tuple[int, int], float] = {}


@register_method("test_fedmvp_controlled")
class ControlledFedMVP(FedMVP):
    """FedMVP whose loss *value* is set per (client, round) by the test; the gradient is the
    real one (loss - loss.detach() + target)."""

    def loss(self, images, labels):
        real = super().loss(images, labels)
        c = self.current_client
        return real - real.detach() + TARGETS.get((c.client_id, c.round), 1.0)

    def on_train_start(self):
        super().on_train_start()
        self._before = {k: v.clone() for k, v in self.state_dict().items()}

    def on_train_end(self):
        super().on_train_end()
        after = self.state_dict()
        moved = lambda prefix: any(not torch.equal(self._before[k], after[k]) for k in after if k.startswith(prefix))  # noqa: E731
        c = self.current_client
        TRACE.append(
            {
                "client": c.client_id,
                "round": c.round,
                "lora_before": bool(self._before["use_lora"]),
                "lora_after": bool(after["use_lora"]),
                "block": moved("promptformer."),
                "proj": moved("text_proj."),
                "lora": moved("lora."),
            }
        )


def run_controlled(fake_data_root, tmp_path, attributes_dir, targets, rounds, **method_args):
    TRACE.clear()
    TARGETS.clear()
    TARGETS.update(targets)
    config = tiny_config(
        fake_data_root,
        tmp_path,
        method="test_fedmvp_controlled",
        clients=2,
        shots=4,
        rounds=rounds,
        batch_size=8,
        aggregation="uniform",
        attributes=str(attributes_dir),
        method_args=method_args,
    )
    result = run_experiment(config, write=False, progress=False)
    return {(t["client"], t["round"]): t for t in TRACE}, result


def test_code_mode_switch_from_the_next_round_on_and_never_back(fake_data_root, tmp_path, attributes_dir):
    trace, result = run_controlled(
        fake_data_root,
        tmp_path,
        attributes_dir,
        {(0, 2): 0.3},
        rounds=4,
        local_steps="code",
        lora_check="code",
        lora_trainable="code",
    )
    assert [trace[(0, r)]["lora_before"] for r in (1, 2, 3, 4)] == [False, False, True, True]
    assert trace[(0, 2)]["lora_after"] and trace[(0, 4)]["lora_after"]  # losses of 1.0 later: no way back
    assert not any(trace[(1, r)]["lora_after"] for r in (1, 2, 3, 4))
    # The switch round's one step: the graph had no LoRA and the block is frozen -> only text_proj moves.
    assert (trace[(0, 2)]["block"], trace[(0, 2)]["proj"], trace[(0, 2)]["lora"]) == (False, True, False)
    for r in (3, 4):  # LoRA mode, code: LoRA and text_proj train, the block does not
        assert (trace[(0, r)]["block"], trace[(0, r)]["proj"], trace[(0, r)]["lora"]) == (False, True, True)
    for r in (1, 2, 3, 4):  # the other client stays in normal mode
        assert (trace[(1, r)]["block"], trace[(1, r)]["proj"], trace[(1, r)]["lora"]) == (True, True, False)
    states = result.federation.client_states
    assert bool(states[0]["use_lora"]) and not bool(states[1]["use_lora"])
    assert result.federation.rounds_trained[0] == 4
    assert torch.equal(states[0]["promptformer.attn.in_proj_weight"], states[1]["promptformer.attn.in_proj_weight"])


def test_paper_mode_checks_only_the_first_loss_and_trains_lora_only(fake_data_root, tmp_path, attributes_dir):
    trace, _ = run_controlled(fake_data_root, tmp_path, attributes_dir, {(0, 1): 0.3, (1, 2): 0.3}, rounds=3)
    assert [trace[(0, r)]["lora_before"] for r in (1, 2, 3)] == [False, True, True]
    assert not any(trace[(1, r)]["lora_after"] for r in (1, 2, 3))  # a low loss after the first: too late
    for r in (2, 3):  # paper: LoRA only
        assert (trace[(0, r)]["block"], trace[(0, r)]["proj"], trace[(0, r)]["lora"]) == (False, False, True)


# -- attribute files through the CLI -----------------------------------------------------------
def test_missing_attribute_file_is_a_clean_cli_error(fedbench, fake_data_root, tmp_path):
    done = fedbench(
        "run",
        "--method",
        "fedmvp",
        "--dataset",
        "dtd",
        "--backbone",
        "fedbench-tiny-vit",
        "--pretrained",
        "none",
        "--data-root",
        fake_data_root,
        "--out",
        tmp_path,
        "--wandb",
        "disabled",
        "--clients",
        "2",
        "--shots",
        "2",
        "--rounds",
        "1",
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "'dtd'" in done.stderr
    assert str(fake_data_root / "attributes" / "dtd.json") in done.stderr
    assert "fedbench data download attributes" in done.stderr and "--attributes DIR" in done.stderr
    # A run refused before it trained leaves nothing: no run folder and no `.failed.json`
    # (that record is for a run that failed in its rounds, docs/run-folders.md).
    assert not [p for p in tmp_path.glob("fedmvp_*") if p.is_dir()]
    assert not list(tmp_path.glob("fedmvp_*.failed.json"))


def test_describe_prints_the_papers_counts(fedbench):
    # Derived from the modules on ViT-B/16 (image width W = 768, embedding D = 512; 4 heads,
    # FFN hidden 4W with a GEGLU input of twice that; LoRA rank 8), each Linear with its bias:
    W, D, rank, hidden = 768, 512, 8, 4 * 768
    text_proj = D * W + W  # 512 -> 768
    layer_norm = 2 * W
    attention = (3 * W * W + 3 * W) + (W * W + W)  # in_proj (q, k, v) + out_proj
    ffn = layer_norm + (W * 2 * hidden + 2 * hidden) + (hidden * W + W)  # LN, W -> 2 hidden, hidden -> W
    promptformer = 2 * layer_norm + attention + ffn  # query and key norms, attention, FFN
    lora = 3 * (W * rank + rank * W)  # A and B for query, key and value
    # The paper's code prints these (the FedMVP authors' prompt learner; 267x = 9,845,760 / 36,864).
    assert (text_proj + promptformer, lora) == (9_845_760, 36_864)
    total = text_proj + promptformer + lora
    done = fedbench("methods", "--describe", "fedmvp", "--backbone", "ViT-B-16")
    assert done.returncode == 0, done.stderr
    assert f"{total:,} trainable parameters, {total:,} uploaded per client per round" in done.stdout
    assert f"lora params: {lora:,}" in done.stdout
    assert f"trained before lora switch: {text_proj + promptformer:,}" in done.stdout


def test_logits_stay_fp32_under_bf16_autocast(tiny_backbone, attributes_dir):
    method = make_fedmvp(tiny_backbone, attributes_dir).eval()
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        exact = method.logits(images, CLASSES)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = method.logits(images, CLASSES)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, exact, rtol=0.05, atol=0.3)


@pytest.mark.slow  # needs the test toy CLIP (pretrained once, minutes on a fresh cache); 13 s once cached
def test_fedmvp_runs_on_the_toy_world_from_a_fresh_data_root(fedbench, toy_test_checkpoint, tmp_path):
    root = tmp_path / "data"  # empty: the toy world must write its own attribute file
    done = fedbench(
        "run",
        "--method",
        "fedmvp",
        "--dataset",
        "toy",
        "--pretrained",
        "fedbench-toy-test",
        "--data-root",
        root,
        "--out",
        tmp_path / "runs",
        "--wandb",
        "disabled",
        "--clients",
        "2",
        "--shots",
        "2",
        "--rounds",
        "2",
        "--local-epochs",
        "1",
        "--batch-size",
        "8",
        "--aggregation",
        "uniform",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(next((tmp_path / "runs").glob("fedmvp_toy_*/summary.json")).read_text())
    assert summary["attributes_file"] == str(root / "attributes" / "toy.json")
    assert set(summary["metrics"]) >= {"Local", "Base", "Novel", "HM"}
    assert all(0 <= summary["metrics"][m] <= 100 for m in ("Local", "Base", "Novel"))


# -- per-domain sentence frames: the frame of the images at hand -------------------------------
def test_the_frame_follows_the_domain_of_the_images_at_hand(tiny_backbone, tmp_path):
    from benchmark.evaluation.accuracy import Evaluator
    from data.base import TensorImages
    from data.transforms import clip_transforms

    folder = tmp_path / "attrs"
    folder.mkdir()
    (folder / "pacs.json").write_text(json.dumps({"dog": ["four legs"], "horse": ["long mane"]}))
    method = build_method("fedmvp", tiny_backbone)
    method.set_class_attributes(load_class_attributes("pacs", ["dog", "horse"], tmp_path, folder))
    # Training: the client's own (source) domain.
    method.set_client(ClientContext(0, 1, ("dog", "horse"), 2, 3, 0, "cartoon"))
    assert method.sentences(["dog"]) == [["a cartoon of a dog, which has four legs"]]
    method.set_client(None)
    assert method.sentences(["dog"]) == [["a photo of a dog, which has four legs"]]  # no domain: the dataset's

    # Evaluation: the scored images' domain (a held-out target reads in its own frame).
    b = tiny_backbone
    transform = clip_transforms(b.image_size, b.image_mean, b.image_std, augment=False).test
    pixels = torch.randint(0, 255, (4, b.image_size, b.image_size, 3), dtype=torch.uint8)
    split = TensorImages(
        "pacs-test", pixels, [0, 1, 0, 1], ["dog", "horse"], transform, ["sketch", "sketch", "photo", "art_painting"]
    )
    seen = []
    encode = method.encode_classes
    method.encode_classes = lambda names: seen.append(method.sentences(names)[0][0]) or encode(names)
    score = Evaluator(method, split, None).load(method.client_state())
    score([0, 1], [0, 1])
    score([2], [0, 1])
    score([0, 1, 2, 3], [0, 1])  # several domains: the dataset's frame
    assert seen == [
        "a sketch of a dog, which has four legs",
        "a photo of a dog, which has four legs",
        "a photo of a dog, which has four legs",
    ]
    assert method.scored_domain is None  # reset after scoring
