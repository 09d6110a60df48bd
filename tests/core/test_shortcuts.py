"""The exact compute shortcuts (`benchmark.shortcuts`) against the plain path of the same code.

Every comparison runs one computation twice, shortcuts on and off (`shortcuts.use`), in
fp32 on the toy CLIP (trained weights, so predictions mean something) or the tiny random
CLIP, and asserts
  - max relative difference max|on - off| / max|off| <= TOLERANCE, and
  - identical argmax predictions.
The shortcuts reorder float sums (a shorter attention row, a split sequence of blocks), so
equality is up to fp32 rounding, not bit for bit: that is why `shortcuts` is part of a
run's identity.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark import shortcuts
from benchmark.backbone import ImagePrefix
from benchmark.backbone_weights import BackboneError
from benchmark.registry import build_method
from benchmark.runs.identity import cell_hash

TOLERANCE = 1e-5  # fp32: measured differences are ~1e-7 (docs/performance.md)
# FedOTP's transport plan exp(-(1 - sim) / eps), eps = 0.01, magnifies a 1e-7 change of the
# text features ~50x: its plain path moves by 6e-6 when its prompt is scaled by 1 + 1e-7.
METHOD_TOLERANCE = {"fedotp": 5e-5}
# Hyperparameters that fit the toy CLIP's 4 blocks per tower (as the toy preset sets them).
TOY_ARGS = {"pfedmma": {"first_block": 2}, "fedmaple": {"depth": 3}, "pfedmoap": {"gate_heads": 4}}
METHODS = (
    "zeroshot",
    "promptfl",
    "fedotp",
    "fedpgp",
    "pfedmoap",
    "clip_adapter",
    "lora",
    "pfedmma",
    "fedmaple",
    "fedvpt",
    "fedclip",
    "fedcocoop",
    "fedtpg",
    "fedmvp",
)


def relative_difference(fast: torch.Tensor, plain: torch.Tensor) -> float:
    return float((fast - plain).abs().max() / plain.abs().max())


def assert_same(fast: torch.Tensor, plain: torch.Tensor, tolerance: float = TOLERANCE) -> float:
    """The shortcut's output equals the plain one within `tolerance`, with the same argmax."""
    difference = relative_difference(fast, plain)
    assert difference <= tolerance, difference
    assert torch.equal(fast.argmax(-1), plain.argmax(-1))
    return difference


def both(compute):
    """compute() with shortcuts on, then off."""
    with shortcuts.use(True):
        fast = compute()
    with shortcuts.use(False):
        plain = compute()
    return fast, plain


@pytest.fixture(scope="module")
def toy_batch(toy_splits):
    """16 toy test images and the base class names."""
    split = toy_splits.test
    images = torch.stack([split[i][0] for i in range(0, 16 * 7, 7)])
    return images, list(split.class_names[: (len(split.class_names) + 1) // 2])


# -- 1. the text tower stops at the batch's longest prompt ------------------------------------
@pytest.mark.parametrize("which", ["toy_test_backbone", "tiny_backbone"])
def test_text_tower_runs_only_up_to_the_longest_prompt(which, request):
    backbone = request.getfixturevalue(which)
    prompts = ["a photo of a red circle.", "a photo of a large striped blue square on a plain background."]
    tokens = backbone.tokenize(prompts)
    longest = int(tokens.argmax(-1).max()) + 1
    assert longest < backbone.context_length  # something to cut
    seen = []
    hook = backbone.blocks("text")[0].register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[1]))
    try:
        fast, plain = both(lambda: backbone.encode_text(tokens))
    finally:
        hook.remove()
    assert seen == [longest, backbone.context_length]
    assert_same(fast, plain)
    # The EOT-pooled features are the same as a batch of either prompt alone (no cross-talk).
    alone = torch.cat([backbone.encode_text(tokens[i : i + 1]) for i in range(len(prompts))])
    assert_same(alone, plain)


def test_a_text_tower_without_causal_mask_is_never_cut(tiny_backbone, monkeypatch):
    tokens = tiny_backbone.tokenize(["a cat."])
    monkeypatch.setattr(tiny_backbone, "_causal_text", False)
    assert tiny_backbone.text_length(tokens) == tiny_backbone.context_length


def test_learned_context_prompts_are_cut_too(toy_test_backbone, toy_batch):
    from benchmark.prompts import ContextPrompts

    _, names = toy_batch
    prompts = ContextPrompts(toy_test_backbone, 4)
    ctx = torch.randn(4, toy_test_backbone.text.width) * 0.02
    tokens = prompts.layout(names).tokens
    assert toy_test_backbone.text_length(tokens) == int(tokens.argmax(-1).max()) + 1
    assert_same(*both(lambda: prompts.encode(ctx, names)))
    per_image = ctx.expand(3, len(names), -1, -1)  # CoCoOp's [B, C, n_ctx, W]
    assert_same(*both(lambda: prompts.encode(per_image, names)))


@pytest.mark.parametrize("name", METHODS)
def test_every_method_gives_the_same_logits_and_gradients(name, toy_test_backbone, toy_batch, tmp_path):
    """Each registered method's whole forward (both towers, all shortcuts that apply to it)
    and the gradients of every trainable parameter, shortcuts on vs off. One fresh instance
    per pass: methods keep their own caches of frozen text features, which would otherwise
    carry the first pass's numbers into the second."""
    images, names = toy_batch
    labels = torch.arange(len(images)) % len(names)

    def forward():
        torch.manual_seed(0)
        method = build_method(name, toy_test_backbone, TOY_ARGS.get(name, {}))
        if method.uses_class_attributes:
            from data.attributes import load_class_attributes

            method.set_class_attributes(load_class_attributes("toy", names, tmp_path))
        if name == "pfedmoap":  # downloaded experts, so the gate and the expert path run
            experts = torch.randn_like(method.experts) * 0.02
            method.load_client_state({"experts": experts, "expert_count": torch.tensor([len(experts)])})
        with torch.no_grad():  # move every parameter off its initial value (zero-initialized ups, B = 0 in LoRA)
            for parameter in method.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.01)
        method.eval()  # no dropout: the two passes must see the same function
        logits = method.logits(images, names)
        if logits.requires_grad:  # zero-shot trains nothing
            F.cross_entropy(logits, labels).backward()
        grads = {k: p.grad.clone() for k, p in method.named_parameters() if p.grad is not None}
        return logits.detach(), grads

    (fast, fast_grads), (plain, plain_grads) = both(forward)
    tolerance = METHOD_TOLERANCE.get(name, TOLERANCE)
    assert_same(fast, plain, tolerance)
    assert fast_grads.keys() == plain_grads.keys()
    if not plain_grads:
        return
    # Gradients as one vector, relative to its largest entry: some entries are rounding
    # noise around an exact 0 (pFedMoAP's gate key bias: softmax ignores a shift), and the
    # gate's softmax (scale 10) amplifies 1e-7 input changes ~100x in its own gradient.
    top = max(float(g.abs().max()) for g in plain_grads.values())
    for key, grad in plain_grads.items():
        assert float((fast_grads[key] - grad).abs().max()) <= tolerance * top, key
        if grad.abs().max() > 1e-4 * top:  # every real gradient points the same way
            assert F.cosine_similarity(fast_grads[key].flatten(), grad.flatten(), dim=0) > 1 - 1e-6, key


# -- 2b. the frozen text prefix of fixed prompts ------------------------------------------------
def test_frozen_text_prefix_is_computed_once_and_trains_the_same(toy_test_backbone, toy_batch):
    """pFedMMA's "a photo of a {}." through the unadapted text blocks: computed on the
    first call only; the adapters after it get the plain path's gradients."""
    backbone = toy_test_backbone
    _, names = toy_batch
    torch.manual_seed(0)
    method = build_method("pfedmma", backbone, {"first_block": 3})  # text blocks 1-2 frozen
    calls = []
    hooks = [backbone.blocks("text")[i].register_forward_pre_hook(lambda *_: calls.append(1)) for i in range(2)]
    try:
        with shortcuts.use(True):
            first = method.encode_classes(names)
            after_first = len(calls)
            again = method.encode_classes(names)
            assert len(calls) == after_first  # the frozen prefix was not run again
        with shortcuts.use(False):
            method.encode_classes(names)
            assert len(calls) == after_first + 2  # the plain path runs both blocks every call
    finally:
        for hook in hooks:
            hook.remove()
    assert torch.equal(first, again)

    def step():
        method.zero_grad()
        method.encode_classes(names).sum().backward()
        return method.text_down["3"].weight.grad.clone()

    fast, plain = both(step)
    assert fast.abs().max() > 0 and relative_difference(fast, plain) <= TOLERANCE


def test_text_prefix_is_not_taken_for_learned_embeddings(tiny_backbone):
    """With embeddings (learned context) the input is not fixed: nothing is cached."""
    tokens = tiny_backbone.tokenize(["a photo of a cat."])
    embeddings = tiny_backbone.token_embedding(tokens) + 0.1
    before = len(tiny_backbone._text_prefixes)
    with shortcuts.use(True):
        tiny_backbone.encode_text(tokens, embeddings, {2: lambda block, x, mask: block(x, attn_mask=mask)})
    assert len(tiny_backbone._text_prefixes) == before


def test_a_cached_text_prefix_changed_in_place_is_never_served(tiny_backbone):
    """A wrapper that writes into its input (bad manners, legal in the plain path) must not
    change what the next call starts from."""
    tokens = tiny_backbone.tokenize(["a photo of a dog."])

    def in_place(block, x, mask):
        x += 1.0
        return block(x, attn_mask=mask)

    with shortcuts.use(True):
        first = tiny_backbone.encode_text(tokens, block_wrappers={2: in_place})
        second = tiny_backbone.encode_text(tokens, block_wrappers={2: in_place})
    with shortcuts.use(False):
        plain = tiny_backbone.encode_text(tokens, block_wrappers={2: in_place})
    assert_same(first, plain)
    assert_same(second, plain)


# -- 2a. the image prefix in evaluation ---------------------------------------------------------
def test_image_prefix_gives_the_plain_features(toy_test_backbone, toy_batch):
    images, names = toy_batch
    torch.manual_seed(0)
    method = build_method("pfedmma", toy_test_backbone, {"first_block": 3})
    with torch.no_grad():
        for parameter in method.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.01)
    assert method.frozen_image_blocks == 2
    with torch.no_grad():
        plain = method.encode_images(images)
        prefix = toy_test_backbone.image_prefix(images, method.frozen_image_blocks)
        fast = method.image_features(prefix)
    assert_same(fast, plain)


def test_a_wrapper_inside_the_declared_prefix_is_an_error(toy_test_backbone, toy_batch):
    images, _ = toy_batch
    prefix = toy_test_backbone.image_prefix(images[:2], 2)
    identity = lambda block, x, mask: block(x, attn_mask=mask)  # noqa: E731
    with pytest.raises(BackboneError, match="frozen_image_blocks = 2.*block 2"):
        toy_test_backbone.encode_image(prefix, {1: identity})
    with pytest.raises(BackboneError, match="visual prompts"):
        toy_test_backbone.encode_image(prefix, prompts=torch.zeros(1, toy_test_backbone.vision.width))
    with pytest.raises(BackboneError, match="frozen_image_blocks = 0"):
        toy_test_backbone.image_embeddings(prefix)
    assert isinstance(prefix, ImagePrefix) and len(prefix) == 2


@pytest.mark.parametrize("budget", [None, 0, 3])
def test_evaluation_shares_the_image_prefix_and_scores_the_same(toy_test_backbone, toy_splits, budget):
    """Local/Base/Novel-style accuracies of two clients through the evaluator: the image
    prefix is computed once per test image (or, over the byte budget, recomputed)."""
    from benchmark.evaluation.accuracy import Evaluator
    from benchmark.federation.features import FeatureCache

    split = toy_splits.test
    torch.manual_seed(0)
    method = build_method("pfedmma", toy_test_backbone, {"first_block": 3, "lr": 0.05})
    states = []
    for _ in range(2):
        with torch.no_grad():
            for parameter in method.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
        states.append(method.client_state())
    base = list(range((len(split.class_names) + 1) // 2))
    indices = [i for i in range(len(split)) if split.labels[i] in base][:60]
    row_bytes = (1 + (toy_test_backbone.image_size // 8) ** 2) * toy_test_backbone.vision.width * 4
    cache = FeatureCache(batch_size=16, progress=False, prefix_bytes=1 << 30 if budget is None else budget * row_bytes)
    blocks_run = []
    hook = toy_test_backbone.blocks("vision")[0].register_forward_pre_hook(lambda _, a: blocks_run.append(len(a[0])))

    def scores():
        evaluator = Evaluator(method, split, cache, batch_size=16)
        return torch.tensor([evaluator.load(s)(indices, base) for s in states])

    try:
        fast, plain = both(scores)
    finally:
        hook.remove()
    assert torch.equal(fast, plain)  # accuracies: the predictions are the same
    images_through_block_1 = sum(blocks_run) - 2 * len(indices)  # minus the plain path's two clients
    kept = set(indices[: len(indices) if budget is None else budget])
    calls = [indices[start : start + 16] for start in range(0, len(indices), 16)]  # the evaluator's batches

    def padded(rows: int) -> int:  # the cache computes in batches of exactly 16 rows
        return -(-rows // 16) * 16

    # Once per image for both clients, plus every image beyond the budget once more per client.
    first_client = sum(padded(len(call)) for call in calls)
    second_client = sum(padded(len([i for i in call if i not in kept])) for call in calls)
    assert images_through_block_1 == first_client + second_client


# -- 2c. pFedMoAP's downloaded experts ---------------------------------------------------------
def test_pfedmoap_encodes_its_frozen_experts_once_per_class_list(toy_test_backbone, toy_batch):
    images, names = toy_batch
    torch.manual_seed(0)
    method = build_method("pfedmoap", toy_test_backbone, TOY_ARGS["pfedmoap"])
    experts = torch.randn_like(method.experts) * 0.02
    method.load_client_state({"experts": experts, "expert_count": torch.tensor([len(experts)])})
    encoded = []
    original = method._encode_experts
    method._encode_experts = lambda e, n: encoded.append(1) or original(e, n)
    labels = torch.arange(len(images)) % len(names)

    def steps():
        out = []
        for _ in range(3):
            logits = method.logits(images, names)
            F.cross_entropy(logits, labels).backward()
            out.append(logits.detach())
        return torch.stack(out)

    with shortcuts.use(True):
        fast = steps()
    assert len(encoded) == 1
    with shortcuts.use(False):
        plain = steps()
    assert len(encoded) == 1 + 3
    assert_same(fast, plain)
    # New experts (the next round's download) are encoded anew, never served stale.
    method.load_client_state({"experts": experts * 2, "expert_count": torch.tensor([len(experts)])})
    with shortcuts.use(True):
        method.encode_classes(names)
    assert len(encoded) == 1 + 3 + 1


# -- 3. the switch ------------------------------------------------------------------------------
def test_no_shortcuts_flag_is_a_documented_result_setting(fedbench, fake_data_root, tmp_path, capsys):
    with pytest.raises(SystemExit):  # argparse's --help exits
        fedbench("run", "--help")
    assert "--no-shortcuts" in capsys.readouterr().out
    on = tiny_config(fake_data_root, tmp_path)
    off = tiny_config(fake_data_root, tmp_path, shortcuts=False)
    assert on.shortcuts is True and cell_hash(on) != cell_hash(off)  # part of the cell identity
    done = fedbench("run", "--method", "zeroshot", "--no-shortcuts", "--print-config")
    assert done.returncode == 0 and "shortcuts: false" in done.stdout


@pytest.mark.parametrize("method", ["pfedmma", "pfedmoap", pytest.param("fedmaple", marks=pytest.mark.slow)])
def test_a_short_toy_run_scores_the_same_with_and_without_shortcuts(method, tmp_path):
    """2 rounds, 3 clients on the toy world: the same Local / Base / Novel either way."""
    from benchmark.config import build_config
    from benchmark.runs.runner import run_experiment

    def run(enabled: bool):
        config = build_config(
            dict(
                method=method,
                dataset="toy",
                backbone="fedbench-toy-vit",
                pretrained="fedbench-toy-test",
                clients=3,
                shots=4,
                rounds=2,
                local_epochs=1,
                batch_size=4,
                seed=1,
                wandb="disabled",
                out=str(tmp_path),
                shortcuts=enabled,
            ),
            {"method_args": TOY_ARGS.get(method, {})},
        )
        return run_experiment(config, write=False, progress=False)

    fast, plain = run(True), run(False)
    for metric in ("Local", "Base", "Novel"):
        assert fast.summary["metrics"][metric] == plain.summary["metrics"][metric], metric
    for cid, state in plain.federation.client_states.items():
        for key, value in state.items():
            if value.is_floating_point() and value.abs().max() > 0:
                assert relative_difference(fast.federation.client_states[cid][key], value) <= 1e-4, (cid, key)


def test_evaluation_encodes_each_class_set_once_per_state(toy_test_backbone, toy_splits):
    """Local and Base both classify over all base classes: one encode_classes for both."""
    from benchmark.evaluation.accuracy import Evaluator, accuracy

    split = toy_splits.test
    method = build_method("promptfl", toy_test_backbone)
    calls = []
    original = method.encode_classes
    method.encode_classes = lambda names: calls.append(tuple(names)) or original(names)
    base = list(range((len(split.class_names) + 1) // 2))
    novel = list(range(len(base), len(split.class_names)))
    own = [i for i in range(len(split)) if split.labels[i] in base[:2]][:20]
    every_base = [i for i in range(len(split)) if split.labels[i] in base][:40]
    every_novel = [i for i in range(len(split)) if split.labels[i] in novel][:40]
    score = Evaluator(method, split, None, batch_size=16).load(method.client_state())
    scores = [score(own, base), score(every_base, base), score(every_novel, novel)]
    assert len(calls) == 2  # base once, novel once
    plain = [
        accuracy(method, split, i, c, batch_size=16) for i, c in ((own, base), (every_base, base), (every_novel, novel))
    ]
    assert scores == plain
