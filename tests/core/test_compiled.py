"""Compiled blocks (`benchmark.compiled`, `--compile-blocks`) against the eager blocks.

The fast tests compile with torch.compile's "eager" backend (the same tracing and graph,
no code generation: seconds); the slow one with the backend a run uses, inductor, whose
fused kernels sum in another order. Neither is bit for bit (the traced attention is not the
eager module's fused path): equal within fp32 rounding, like the exact shortcuts
(tests/core/test_shortcuts.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_config

from benchmark import compiled
from benchmark.backbone import computing_key
from benchmark.config import ConfigError
from benchmark.registry import build_method
from benchmark.runs.identity import cell_hash

TOLERANCE = 1e-5  # fp32; measured ~2e-7 relative on the toy CLIP (both backends)
TOY_ARGS = {"pfedmma": {"first_block": 2}}


def pfedmma_step(backbone, images, names):
    """pFedMMA's logits and the gradients of its adapters (wrapped blocks in both towers)."""
    torch.manual_seed(0)
    method = build_method("pfedmma", backbone, TOY_ARGS["pfedmma"])
    with torch.no_grad():  # move the zero-initialized ups off zero: every adapter path counts
        for parameter in method.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.01)
    method.eval()
    logits = method.logits(images, names)
    F.cross_entropy(logits, torch.arange(len(images)) % len(names)).backward()
    return logits.detach(), {k: p.grad.clone() for k, p in method.named_parameters() if p.grad is not None}


@pytest.fixture
def toy_batch(toy_splits):
    split = toy_splits.test
    images = torch.stack([split[i][0] for i in range(0, 8 * 7, 7)])
    return images, list(split.class_names[:5])


@pytest.fixture
def eager_backend(monkeypatch):
    monkeypatch.setattr(compiled, "BACKEND", "eager")
    monkeypatch.setattr(compiled, "_COMPILED", type(compiled._COMPILED)())
    torch.compiler.reset()  # no graph of another test's backend is reused
    yield
    torch.compiler.reset()


def assert_same_step(on, off, tolerance: float) -> None:
    (logits, grads), (plain_logits, plain_grads) = on, off
    assert float((logits - plain_logits).abs().max() / plain_logits.abs().max()) <= tolerance
    assert grads.keys() == plain_grads.keys() and grads
    top = max(float(g.abs().max()) for g in plain_grads.values())
    for key, grad in plain_grads.items():
        assert float((grads[key] - grad).abs().max()) <= tolerance * top, key


def test_a_compiled_block_runs_only_under_the_switch_and_computes_the_eager_step(
    eager_backend, toy_test_backbone, toy_batch
):
    images, names = toy_batch
    off = pfedmma_step(toy_test_backbone, images, names)
    assert len(compiled._COMPILED) == 0  # noqa: SLF001  (off: nothing compiled)
    with compiled.use(True):
        on = pfedmma_step(toy_test_backbone, images, names)
    blocks = [*toy_test_backbone.blocks("text"), *toy_test_backbone.blocks("vision")]
    # every block that ran (the text tower's frozen prefix is cached by the shortcuts) is compiled once
    assert 0 < len(compiled._COMPILED) <= len(blocks)  # noqa: SLF001
    with compiled.use(True):  # one compiled module per block, kept for later runs
        assert all(compiled.block(b) is c["default"] and c["default"] is not b for b, c in compiled._COMPILED.items())  # noqa: SLF001
    assert_same_step(on, off, TOLERANCE)
    assert not compiled.active()


def test_the_compile_mode_is_checked_and_keys_the_caches(monkeypatch):
    # CUDA graphs (reduce-overhead) are opt-in through FEDBENCH_COMPILE_MODE; the mode keeps
    # cached activations apart, and a wrong value names the variable and the choices.
    with compiled.use(True):
        default = computing_key("cpu")
        monkeypatch.setenv("FEDBENCH_COMPILE_MODE", "reduce-overhead")
        assert computing_key("cpu") != default
        monkeypatch.setenv("FEDBENCH_COMPILE_MODE", "fast")
        with pytest.raises(
            ConfigError, match=r"FEDBENCH_COMPILE_MODE = 'fast' is invalid: expected default \| reduce-overhead"
        ):
            compiled.block(torch.nn.Linear(1, 1))


def test_compile_blocks_is_a_result_setting_refused_with_the_batched_passes(fake_data_root, tmp_path):
    on = tiny_config(fake_data_root, tmp_path, compile_blocks=True)
    off = tiny_config(fake_data_root, tmp_path)
    assert off.compile_blocks is False and cell_hash(on) != cell_hash(off)  # part of the cell identity
    for batched in ("batched_training", "batched_evaluation"):
        with pytest.raises(ConfigError, match=rf"compile_blocks = true cannot be combined with .*{batched}"):
            tiny_config(fake_data_root, tmp_path, compile_blocks=True, **{batched: True})


def test_the_run_compiles_its_blocks(eager_backend, fedbench, fake_data_root, tmp_path):
    from benchmark.runs.runner import run_experiment

    config = tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=1, compile_blocks=True)
    result = run_experiment(config, write=False, progress=False)
    assert len(compiled._COMPILED) > 0 and not compiled.active()  # noqa: SLF001  (on for the run only)
    assert set(result.summary["metrics"]) >= {"Local", "Base", "Novel", "HM"}
    done = fedbench("run", "--method", "zeroshot", "--compile-blocks", "true", "--print-config")
    assert done.returncode == 0 and "compile_blocks: true" in done.stdout


@pytest.mark.slow
def test_inductor_blocks_give_the_eager_step_within_fp32_rounding(toy_test_backbone, toy_batch):
    images, names = toy_batch
    off = pfedmma_step(toy_test_backbone, images, names)
    with compiled.use(True):
        on = pfedmma_step(toy_test_backbone, images, names)
    assert_same_step(on, off, TOLERANCE)
