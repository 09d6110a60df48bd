"""Batched evaluation: every client's model on a test batch in one vmapped pass scores as
the clients scored one by one (benchmark/evaluation/batched.py)."""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import method_config, tiny_config

from benchmark.evaluation.accuracy import Evaluator, accuracy
from benchmark.evaluation.batched import BatchedScorer, evaluation_probe, probe, stack_states
from benchmark.federation.features import FeatureCache
from benchmark.method import FederatedMethod
from benchmark.registry import builtin_methods, register_method
from benchmark.runs.preparation import prepare_run
from benchmark.runs.runner import run_experiment

# zeroshot has no client state: every client is the same model, scored once (the memo).
BATCHED = sorted(n for n, c in builtin_methods().items() if c.batched_evaluation and n != "zeroshot")
UNBATCHED = sorted(n for n, c in builtin_methods().items() if not c.batched_evaluation)


def client_states(method: FederatedMethod, count: int = 3) -> list:
    """`count` different client states: the trainable state moved by seeded noise."""
    states = []
    for seed in range(count):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for parameter in method.parameters():
                if parameter.requires_grad:
                    parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
        states.append(method.client_state())
    return states


def prepared(name: str, fake_data_root, tmp_path):
    run = prepare_run(method_config(name, fake_data_root, tmp_path), progress=False, train_features=False)
    return run, run.method, run.dataset.test


def test_every_built_in_method_says_whether_it_batches():
    assert set(BATCHED) >= {"pfedmma", "promptfl", "lora", "clip_adapter", "fedpgp"}
    assert set(UNBATCHED) == {"fedotp", "pfedmoap", "fedmvp"}  # each says why on its class line


@pytest.mark.parametrize("name", BATCHED)
def test_batched_logits_and_accuracies_equal_client_by_client(name, fake_data_root, tmp_path):
    run, method, split = prepared(name, fake_data_root, tmp_path)
    states = client_states(method)
    indices = list(range(len(split)))
    class_ids = list(range(len(split.class_names)))
    cache = FeatureCache(progress=False)
    scorer = BatchedScorer(method, split, cache, batch_size=16)
    stacked = stack_states(states)
    inputs, _ = next(scorer.batches(indices))
    with torch.no_grad():
        together = scorer.logits(stacked, inputs, scorer.class_features(stacked, class_ids))
    names = [split.class_names[c] for c in class_ids]
    for k, state in enumerate(states):
        method.load_client_state(state)
        method.eval()
        with torch.no_grad():
            alone = method.classify(method.image_features(inputs), method.encode_classes(names))
        assert torch.allclose(together[k], alone, rtol=1e-5, atol=1e-5 * alone.abs().max()), name
    if name != "zeroshot":
        assert not torch.equal(together[0], together[1])  # the states differ, so must their logits
    # Accuracies over the whole split, in batches of 16 (one short): those of `accuracy`.
    batched = scorer.accuracies(states, indices, class_ids)
    for k, state in enumerate(states):
        method.load_client_state(state)
        assert batched[k] == accuracy(method, split, indices, class_ids, cache, 16)


@pytest.mark.parametrize("name", UNBATCHED)
def test_the_methods_that_do_not_batch_would_fail_the_probe(name, fake_data_root, tmp_path):
    """Their `batched_evaluation = False` is needed: vmap refuses their hooks."""
    run, method, split = prepared(name, fake_data_root, tmp_path)
    states = client_states(method, 2)
    scorer = BatchedScorer(method, split, FeatureCache(progress=False), batch_size=16)
    before = method.client_state()
    guard = evaluation_probe(method)  # the probe's error is the reason the run falls back with
    with pytest.warns(UserWarning, match="its clients are evaluated one by one, not in one batched pass"):
        assert not guard.allows(
            lambda: probe(scorer, states, list(range(len(split))), list(range(len(split.class_names))))
        )
    assert "vmap" in guard.refused
    assert all(torch.equal(before[k], v) for k, v in method.client_state().items())  # the probe restores the state


@pytest.mark.parametrize("name, args", [("pfedmma", {"first_block": 2, "lr": 0.1}), ("promptfl", {}), ("lora", {})])
def test_whole_runs_batched_and_one_by_one_agree(name, args, fake_data_root, tmp_path):
    """Same training (evaluation does not feed it), same predictions: the same metrics."""
    results = {}
    for batched in (True, False):
        config = tiny_config(
            fake_data_root,
            tmp_path,
            method=name,
            method_args=args,
            # 4 clients over 6 base classes: 2, 2, 1 and 1 classes, unequal Local test sets
            clients=4,
            batched_evaluation=batched,
        )
        results[batched] = run_experiment(config, write=False, progress=False)
    assert results[True].summary["metrics"] == results[False].summary["metrics"]
    assert results[True].per_client == results[False].per_client


@register_method("test_itemizing_prompt")
class ItemizingPrompt(FederatedMethod):
    """A prompt whose class features branch on a tensor's value: vmap cannot batch it, and
    the class does not say so."""

    upload_keys = ("ctx",)
    frozen_image_features = True

    def __init__(self, backbone) -> None:
        super().__init__(backbone)
        self.register_buffer("ctx", torch.zeros(backbone.text.width))  # per client, set by the test

    def encode_classes(self, class_names):
        features = super().encode_classes(class_names)
        return features * 2 if self.ctx.sum().item() > 0 else features


def test_a_method_vmap_cannot_batch_is_evaluated_one_by_one_with_a_warning(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="test_itemizing_prompt")
    run = prepare_run(config, progress=False, train_features=False)
    evaluator = Evaluator(run.method, run.dataset.test, FeatureCache(progress=False), 16, batched=True)
    states = {}
    for cid, sign in enumerate((1.0, -1.0, 1.0)):
        states[cid] = {"ctx": torch.full_like(run.method.ctx, sign * (cid + 1))}
    from benchmark.evaluation.client_metrics import evaluate_clients

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        together, _ = evaluate_clients(evaluator, run.protocol, run.dataset, run.partition, states, progress=False)
    assert any("evaluated one by one" in str(w.message) and ".item()" in str(w.message) for w in caught)
    assert evaluator.scorer is None
    alone = Evaluator(run.method, run.dataset.test, FeatureCache(progress=False), 16, batched=False)
    assert together == evaluate_clients(alone, run.protocol, run.dataset, run.partition, states, progress=False)[0]


def test_flower_refuses_batched_evaluation(fedbench, tmp_path):
    """A Flower node holds one client: there is nothing to batch, and the flag must not
    quietly mean nothing (refused before Flower or a model loads)."""
    done = fedbench(
        "flower", "--method", "promptfl", "--batched-evaluation", "true", "--out", tmp_path, "--wandb", "disabled"
    )
    assert done.returncode == 2 and "a Flower node holds one client" in done.stderr
    assert not list(tmp_path.iterdir())
