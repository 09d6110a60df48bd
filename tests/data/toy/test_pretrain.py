"""The toy CLIP is one set of bytes everywhere: the package ships the default and the test
recipe's checkpoints (fp16 state dicts + a manifest), the providers hand those files out
without pretraining, and a rebuild at any torch thread count reproduces them bit for bit."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from data.toy import pretrain
from data.toy.pretrain import CHECKPOINT_DIR, RECIPES, Recipe, read_manifest

ROOT = Path(__file__).resolve().parents[3]


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_manifest_names_both_recipes_and_its_sha256s_match_the_files():
    manifest = read_manifest()
    assert {entry["recipe"] for entry in manifest.values()} == {"default", "test", "v7"}
    for recipe_hash, entry in manifest.items():
        assert RECIPES[entry["recipe"]].hash == recipe_hash, "shipped file of an outdated recipe: rebuild it"
        path = CHECKPOINT_DIR / entry["file"]
        assert path.is_file()
        assert _sha(path) == entry["sha256"]
        assert path.stat().st_size == entry["bytes"]
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert all(v.dtype == torch.float16 for v in state.values() if v.is_floating_point())
    # the package data covers the shipped files (pyproject's package-data)
    assert "toy/checkpoints/*" in (ROOT / "pyproject.toml").read_text()


def test_providers_return_the_shipped_files_with_an_empty_cache_and_never_pretrain(tmp_path, monkeypatch):
    from benchmark.backbone_weights import PRETRAINED_CACHED, PRETRAINED_PROVIDERS, check_backbone

    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path))

    def no_build(*args, **kwargs):
        raise AssertionError("the provider pretrained although a shipped checkpoint exists")

    monkeypatch.setattr(pretrain, "build_checkpoint", no_build)
    monkeypatch.setattr(pretrain, "train_model", no_build)
    files = {entry["recipe"]: CHECKPOINT_DIR / entry["file"] for entry in read_manifest().values()}
    for provider, recipe in (("fedbench-toy", "default"), ("fedbench-toy-test", "test"), ("fedbench-toy7", "v7")):
        assert PRETRAINED_PROVIDERS[provider]() == files[recipe]
        assert PRETRAINED_CACHED[provider]() == files[recipe]
        assert check_backbone("fedbench-toy-vit", provider) is None  # nothing to build
    assert list(tmp_path.iterdir()) == []  # nothing copied or built into the cache


def test_run_identity_names_the_shipped_bytes(tmp_path, monkeypatch):
    from benchmark.runs.identity import weights_identity

    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path))  # an empty cache: a fresh machine
    for entry in read_manifest().values():
        provider = {"default": "fedbench-toy", "test": "fedbench-toy-test", "v7": "fedbench-toy7"}[entry["recipe"]]
        identity = weights_identity("fedbench-toy-vit", provider)
        assert identity.endswith(f"sha256:{entry['sha256'][:16]}"), identity


def test_a_recipe_without_a_shipped_file_is_built_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path))
    recipe = Recipe(steps=2, batch_size=8, warmup=1)
    assert pretrain.shipped_checkpoint(recipe) is None
    path = pretrain.ensure_checkpoint(recipe, progress=False)
    assert path == tmp_path / pretrain.checkpoint_name(recipe) and path.is_file()


def test_state_dict_bytes_are_deterministic():
    import open_clip

    model = open_clip.create_model("fedbench-toy-vit")
    a, b = pretrain.state_dict_bytes(model), pretrain.state_dict_bytes(model)
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()


_BUILD = (
    "import sys, torch\n"
    "torch.set_num_threads(int(sys.argv[1]))\n"
    "from data.toy.pretrain import RECIPES, Recipe, build_checkpoint\n"
    "recipe = RECIPES[sys.argv[3]] if sys.argv[3] in RECIPES else Recipe(steps=3, batch_size=8, warmup=1)\n"
    "build_checkpoint(recipe, sys.argv[2], progress=False)\n"
    "assert torch.get_num_threads() == int(sys.argv[1]), 'the build did not restore the thread count'\n"
)


def _build_in_subprocess(threads: int, out: Path, recipe: str) -> Path:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-c", _BUILD, str(threads), str(out), recipe],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=900,
    )
    return out


def test_a_short_build_gives_the_same_bytes_at_1_and_2_threads(tmp_path):
    one = _build_in_subprocess(1, tmp_path / "one.pt", "tiny")
    two = _build_in_subprocess(2, tmp_path / "two.pt", "tiny")
    assert _sha(one) == _sha(two)


@pytest.mark.slow
def test_the_test_recipe_rebuilds_to_the_same_bytes_at_1_and_2_threads(tmp_path):
    """The build does not depend on the caller's thread count. It does depend on the CPU's
    kernels: world version 4's test checkpoint, built on an earlier machine, rebuilt to other
    bytes on the AMD EPYC (AVX-512) where version 5's files were built (and to a third sha256
    under ATEN_CPU_CAPABILITY=avx2), which is why the checkpoints ship and a run's identity
    names the file's bytes."""
    # The two builds run at once (the thread count, not the load, is what must not matter):
    # about half the wall time of one after the other, which CI's 30 minutes need.
    with ThreadPoolExecutor(2) as pool:
        one, two = pool.map(lambda t: _build_in_subprocess(t, tmp_path / f"test-{t}.pt", "test"), (1, 2))
    assert _sha(one) == _sha(two)
