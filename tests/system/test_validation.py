"""Validate before load: what cannot work is reported before any backbone is built or pretrained."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("FEDBENCH_CACHE", str(cache))
    return cache


# What the cell identity memoizes of the code (benchmark/runs/identity.py): the code's
# syntax trees and import lists, written by any command that names a cell; not weights,
# data or runs.
IDENTITY_MEMOS = {"code-trees", "module-imports"}


def nothing_built(cache) -> bool:
    return not cache.exists() or not [p for p in cache.iterdir() if p.name not in IDENTITY_MEMOS]


def test_unknown_method_is_reported_before_the_toy_clip_is_pretrained(fedbench, empty_cache, tmp_path):
    done = fedbench("run", "--method", "nosuch", "--out", tmp_path / "runs", "--wandb", "disabled")
    assert done.returncode == 2 and "unknown method 'nosuch'" in done.stderr
    assert "pretraining" not in done.stdout + done.stderr and nothing_built(empty_cache)


def test_bad_hyperparameter_in_yaml_is_reported_before_loading(fedbench, empty_cache, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("method: promptfl\nmethod_args: {n_ctx: many}\n")
    done = fedbench("run", "--config", config, "--out", tmp_path / "runs", "--wandb", "disabled")
    assert done.returncode == 2 and "hyperparameter 'n_ctx' expects int, got 'many'" in done.stderr
    assert nothing_built(empty_cache)


def test_a_hyperparameter_outside_its_range_stops_the_run_before_anything_starts(
    fedbench, empty_cache, tmp_path, monkeypatch
):
    import benchmark.runs.preparation as preparation
    import benchmark.runs.tracking as tracking

    def refuse(*args, **kwargs):
        raise AssertionError("started before the hyperparameters were checked")

    monkeypatch.setattr(preparation, "load_backbone", refuse)
    monkeypatch.setattr(tracking, "_start", refuse)  # no W&B run, not even a crashed one
    monkeypatch.delenv("WANDB_DIR", raising=False)  # offline W&B would write under --out
    out = tmp_path / "runs"
    done = fedbench("run", "--method", "pfedmma", "--lr", "-1", "--out", out, "--wandb", "offline")
    assert done.returncode == 2
    assert "method 'pfedmma': hyperparameter 'lr' must be > 0, got -1.0" in done.stderr
    assert not out.exists() and nothing_built(empty_cache)

    config = tmp_path / "c.yaml"
    config.write_text("method: promptfl\nmethod_args: {momentum: 1.5}\n")
    done = fedbench("run", "--config", config, "--out", out, "--wandb", "offline")
    assert done.returncode == 2
    assert "hyperparameter 'momentum' must be >= 0 and < 1, got 1.5" in done.stderr
    assert not out.exists()

    # The method's fit to the backbone, from the backbone's config: FedMaPLe's default
    # depth 9 does not fit the toy CLIP's 4 blocks.
    done = fedbench("run", "--method", "fedmaple", "--out", out, "--wandb", "offline")
    assert done.returncode == 2
    assert "depth 9 does not fit backbone 'fedbench-toy-vit'" in done.stderr and "between 1 and 4" in done.stderr
    assert not out.exists() and nothing_built(empty_cache)


def test_a_missing_gpu_is_named_with_what_to_pass_instead(fedbench, empty_cache, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # as on a machine without a GPU
    out = tmp_path / "runs"
    done = fedbench("run", "--method", "zeroshot", "--device", "cuda", "--out", out, "--wandb", "disabled")
    assert done.returncode == 2
    assert "--device cuda: this machine has no CUDA device" in done.stderr and "--device cpu" in done.stderr
    assert "checkpoint" not in done.stderr and not out.exists() and nothing_built(empty_cache)


def test_missing_data_and_missing_checkpoint_are_reported_before_loading(fedbench, empty_cache, tmp_path):
    done = fedbench(
        "run",
        "--method",
        "zeroshot",
        "--dataset",
        "dtd",
        "--data-root",
        tmp_path / "nodata",
        "--out",
        tmp_path / "runs",
        "--wandb",
        "disabled",
    )
    assert done.returncode == 2 and f"looked for the folder {tmp_path / 'nodata' / 'dtd'}" in done.stderr
    assert nothing_built(empty_cache)
    done = fedbench(
        "run",
        "--method",
        "zeroshot",
        "--backbone",
        TINY,
        "--pretrained",
        tmp_path / "nope.pt",
        "--out",
        tmp_path / "runs",
        "--wandb",
        "disabled",
    )
    assert done.returncode == 2 and f"checkpoint file {tmp_path / 'nope.pt'}" in done.stderr
    assert not (tmp_path / "runs").exists()


def test_dry_run_finds_the_shipped_toy_clip_and_builds_nothing(fedbench, empty_cache, tmp_path):
    # The toy CLIP ships with the package (data/toy/checkpoints): an empty cache misses no
    # weights, and planning pretrains nothing. A recipe with no shipped file is still reported
    # "not built yet" (tests/runs/test_identity.py, tests/data/toy/test_pretrain.py).
    done = fedbench("reproduce", "toy", "--dry-run", "--out", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "missing weights" not in done.stdout and "0/" in done.stdout
    assert nothing_built(empty_cache)


def test_dry_run_reports_an_open_clip_tag_missing_from_the_cache(fedbench, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty Hugging Face cache
    monkeypatch.setenv("HOME", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    done = fedbench("reproduce", "base2novel", "--dry-run", "--out", tmp_path / "runs", "--data-root", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "missing weights: weights 'openai' of 'ViT-B-16-quickgelu' are not in the Hugging Face cache" in done.stdout


def test_random_weights_load_without_open_clips_warning(caplog):
    import logging

    from benchmark.backbone import _load_backbone_cached

    with caplog.at_level(logging.WARNING):
        _load_backbone_cached.__wrapped__(TINY, None, "cpu")  # past the per-process cache
    assert not [r for r in caplog.records if "No pretrained weights loaded" in r.getMessage()]


def test_print_config_shows_the_resolved_config_and_presets_lists_the_tables(fedbench, tmp_path):
    import yaml

    done = fedbench("run", "--method", "promptfl", "--n-ctx", "4", "--rounds", "3", "--print-config")
    assert done.returncode == 0, done.stderr
    printed = yaml.safe_load(done.stdout)
    assert printed["rounds"] == 3 and printed["method_args"]["n_ctx"] == 4 and printed["method_args"]["lr"] == 0.002
    (tmp_path / "c.yaml").write_text(done.stdout)
    again = fedbench("run", "--config", tmp_path / "c.yaml", "--print-config")
    assert yaml.safe_load(again.stdout) == printed  # round-trips as a --config file

    listing = fedbench("presets")
    assert listing.returncode == 0
    assert any(line.split()[:3] == ["base2novel", "168", "cells"] for line in listing.stdout.splitlines())
    # An msst preset runs one cell per held-out domain: `presets` counts what `reproduce --dry-run` plans.
    dry = fedbench("reproduce", "toy_generalization", "--dry-run", "--out", tmp_path / "runs")
    planned = next(line.split()[0] for line in dry.stdout.splitlines() if " cells: " in line)
    (line,) = [line for line in listing.stdout.splitlines() if line.startswith("toy_generalization ")]
    assert line.split()[1] == planned and int(planned) > 42  # 42 = datasets x methods x seeds, the old count


def test_fedbench_help_imports_neither_torch_nor_open_clip():
    """`fedbench --help` stays fast (measured: results/perf-notes.md) because no command loads torch to build its parser."""
    import subprocess
    import sys

    script = (
        "import sys\nfrom benchmark.cli import main\n"
        "for argv in (['--help'], ['run', '--help'], ['reproduce', '--help'], ['data', 'download', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print(sorted(m for m in ('torch', 'open_clip', 'lightning', 'wandb', 'pandas') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_method_help_and_describe_show_docs_types_and_choices(fedbench, tmp_path):
    helped = fedbench("run", "--method", "pfedmma", "--method-help")
    assert helped.returncode == 0
    text = " ".join(helped.stdout.split())
    assert "--federate STR str, one of shared | all | none; default 'shared'. what a client uploads" in text
    assert "--alpha FLOAT float, > 0; default 0.001. scale of the adapter's output" in text
    assert "--first-block INT|auto int | 'auto', >= 1; default 'auto'. first adapted block" in text
    described = fedbench("methods", "--describe", "promptfl", "--backbone", TINY)
    assert (
        "  --n-ctx int = 16  (>= 1)\n      number of learned context vectors before the class name (CoOp: 16)."
        in described.stdout
    )
    config = tmp_path / "c.yaml"
    config.write_text("method: pfedmma\nmethod_args: {federate: everything}\n")
    done = fedbench("run", "--config", config, "--print-config")
    assert done.returncode == 2
    assert "hyperparameter 'federate' must be one of 'shared', 'all', 'none', got 'everything'" in done.stderr


def test_openai_weights_without_quickgelu_are_warned_once(monkeypatch, recwarn):
    import benchmark.backbone_weights as weights
    from benchmark.errors import SetupWarning

    monkeypatch.setattr(weights, "_WARNED", set())
    weights.check_backbone("ViT-B-16", "openai")
    weights.check_backbone("ViT-B-16", "openai")  # validate_run runs more than once per command
    weights.check_backbone("ViT-B-16-quickgelu", "openai")  # the weights as trained: nothing to say
    weights.check_backbone("ViT-B-16", "laion2b_s34b_b88k")  # trained with GELU, as ViT-B-16 runs
    warned = [w for w in recwarn if issubclass(w.category, SetupWarning)]
    assert len(warned) == 1
    text = str(warned[0].message)
    assert "'ViT-B-16' with --pretrained openai" in text and "trained with QuickGELU" in text
    assert "Use --backbone ViT-B-16-quickgelu" in text


def test_openai_weights_offline_fail_at_once_saying_how_to_pass_a_file(fedbench, empty_cache, tmp_path, monkeypatch):
    import huggingface_hub.constants as constants

    import benchmark.backbone_weights as weights

    monkeypatch.setattr(weights, "_WARNED", set())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/clip
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty Hugging Face cache

    def never(*args, **kwargs):
        raise AssertionError("the weights were loaded although they cannot be downloaded")

    monkeypatch.setattr(weights.open_clip, "create_model", never)
    out = tmp_path / "runs"
    done = fedbench(
        "run", "--method", "zeroshot", "--dataset", "toy", "--backbone", "ViT-B-16", "--pretrained", "openai",
        "--out", out, "--wandb", "offline",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("fedbench: warning: backbone 'ViT-B-16' with --pretrained openai") == 1
    assert "weights 'openai' of 'ViT-B-16' are not on this machine" in done.stderr
    assert "cannot be downloaded (HF_HUB_OFFLINE is set)" in done.stderr
    assert "--pretrained /path/to/ViT-B-16-openai.pt (docs/running.md, 'Weights'" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists() and nothing_built(empty_cache)


def test_an_unreachable_download_host_is_named_within_the_probe_time(monkeypatch):
    import socket
    import time

    import benchmark.backbone_weights as weights

    def refused(address, timeout=None):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    weights._unreachable.cache_clear()
    assert weights._unreachable("hub.example") == "hub.example cannot be reached: Connection refused"

    def hangs(address, timeout=None):  # a name lookup without network can take minutes
        time.sleep(30)

    monkeypatch.setattr(socket, "create_connection", hangs)
    monkeypatch.setattr(weights, "PROBE_SECONDS", 0.2)
    weights._unreachable.cache_clear()
    started = time.monotonic()
    assert weights._unreachable("slow.example") == "slow.example did not answer within 0.2 s"
    assert time.monotonic() - started < 5
    weights._unreachable.cache_clear()


def test_the_documented_local_checkpoint_recipes_make_a_file_the_suite_loads(tmp_path):
    """docs/running.md, 'Weights': a state_dict saved with torch.save (through open_clip, or
    converted from OpenAI's release with open_clip.load_openai_model) loads as --pretrained
    FILE with the same weights. Run on the tiny CLIP with random weights (no network)."""
    import open_clip
    import torch

    from benchmark.backbone import load_backbone

    torch.manual_seed(3)
    model = open_clip.create_model(TINY)
    direct = tmp_path / "direct.pt"
    torch.save(model.state_dict(), direct)  # the first recipe's last line
    released = tmp_path / "release.pt"  # OpenAI's file holds the same keys (a state dict here, not TorchScript)
    torch.save(model.state_dict(), released)
    converted = open_clip.load_openai_model(str(released), precision="fp32", device="cpu")
    from_release = tmp_path / "from_release.pt"
    torch.save(converted.state_dict(), from_release)  # the second recipe's last line
    loaded = load_backbone(TINY, str(direct)).model.state_dict()
    assert all(torch.equal(loaded[key], value) for key, value in model.state_dict().items())
    # OpenAI's release holds fp16 matrices, and the conversion rounds them so (from fp32 here):
    # each weight is the original or its fp16 rounding, and the matrices are rounded.
    loaded = load_backbone(TINY, str(from_release)).model.state_dict()
    for key, value in model.state_dict().items():
        assert torch.equal(loaded[key], value) or torch.equal(loaded[key], value.half().float()), key
    assert not torch.equal(loaded["text_projection"], model.state_dict()["text_projection"])


def test_a_bad_value_of_a_built_in_method_is_refused_before_torch_loads(tmp_path):
    """`--lr -1` is refused from methods/hyperparameters.json: torch and lightning, seconds
    of imports on a loaded machine, are never loaded (in a fresh process, which holds none)."""
    script = (
        "import sys\n"
        "from benchmark.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print('loaded:', sorted(m for m in ('torch', 'lightning') if m in sys.modules))\n"
        "sys.exit(code)\n"
    )
    out = tmp_path / "runs"
    args = ["run", "--method", "pfedmma", "--dataset", "toy", "--lr", "-1", "--out", str(out), "--wandb", "disabled"]
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache")},
    )
    assert done.returncode == 2, done.stderr
    assert "hyperparameter 'lr' must be > 0, got -1.0" in done.stderr and "pass --lr with a value > 0" in done.stderr
    assert "loaded: []" in done.stdout and not out.exists() and not (tmp_path / "cache").exists()
