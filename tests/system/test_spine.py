"""The simulator, evaluation protocol, results and CLI, on a tiny CLIP and fake split_zhou data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY, client_metrics_with, tiny_config
from torch import nn

from benchmark.federation.simulator import client_sampling_schedule
from benchmark.method import ClientUpdate, FederatedMethod, fedavg, state_bytes
from benchmark.optim import sgd_with_cosine
from benchmark.protocol_registry import get_protocol
from benchmark.registry import register_method
from benchmark.runs import preparation
from benchmark.runs.preparation import prepare_run
from benchmark.runs.runner import run_experiment

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose packages the second run imports


@register_method("test_split_prompt")
class SplitPrompt(FederatedMethod):
    """Test-only method: an uploaded context half and a personal one."""

    upload_keys = ("shared_ctx",)
    frozen_image_features = True

    def __init__(self, backbone, lr: float = 0.5) -> None:
        super().__init__(backbone)
        from benchmark.prompts import ContextPrompts

        self.save_hyperparameters(ignore=["backbone"])
        self.prompts = ContextPrompts(backbone, 4)
        self.shared_ctx = nn.Parameter(torch.randn(2, backbone.text.width) * 0.02)
        self.personal_ctx = nn.Parameter(torch.randn(2, backbone.text.width) * 0.02)

    def encode_classes(self, class_names):
        ctx = torch.cat([self.shared_ctx, self.personal_ctx])
        return F.normalize(self.prompts.encode(ctx, class_names), dim=-1)

    def configure_optimizers(self):
        return sgd_with_cosine(self, self.parameters(), self.hparams.lr)


def test_fedavg_is_the_sample_weighted_mean():
    a, b, c = (torch.tensor([1.0, 2.0]), torch.tensor([3.0, -1.0]), torch.tensor([0.0, 5.0]))
    updates = [ClientUpdate(0, 10, {"w": a}), ClientUpdate(3, 30, {"w": b}), ClientUpdate(7, 60, {"w": c})]
    expected = (10 * a + 30 * b + 60 * c) / 100
    assert torch.allclose(fedavg(updates)["w"], expected)


def test_sampling_stream_depends_on_seed_only():
    a = client_sampling_schedule(20, 0.25, 5, seed=1)
    assert a == client_sampling_schedule(20, 0.25, 5, seed=1)
    assert a != client_sampling_schedule(20, 0.25, 5, seed=2)
    assert a[0] == list(range(20))  # the authors' rule: round 1 trains every client
    assert all(len(r) == 5 and len(set(r)) == 5 for r in a[1:])
    assert client_sampling_schedule(4, 1.0, 3, seed=9) == [[0, 1, 2, 3]] * 3


def test_zero_shot_logits_equal_open_clip(tiny_backbone):
    from methods.zeroshot import ZeroShotCLIP

    method = ZeroShotCLIP(tiny_backbone)
    names = ["red circle", "blue square", "green star"]
    images = torch.randn(5, 3, 32, 32)
    model = tiny_backbone.model
    img = F.normalize(model.encode_image(images), dim=-1)
    txt = F.normalize(model.encode_text(tiny_backbone.tokenize([f"a photo of a {n}." for n in names])), dim=-1)
    expected = model.logit_scale.exp() * img @ txt.t()
    assert torch.allclose(method.logits(images, names), expected, atol=1e-5)


def test_personal_state_is_isolated_and_upload_is_averaged(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="test_split_prompt", rounds=2)
    result = run_experiment(config, write=False, progress=False)
    states = result.federation.client_states
    shared = [s["shared_ctx"] for s in states.values()]
    personal = [s["personal_ctx"] for s in states.values()]
    assert all(torch.equal(shared[0], s) for s in shared[1:])  # broadcast reached every client
    assert all(not torch.equal(personal[0], p) for p in personal[1:])  # each trained its own
    upload_bytes = 2 * TINY_TEXT_WIDTH * 4 * config.clients  # shared_ctx only, fp32, every client
    assert result.summary["bytes_up_per_round"] == [upload_bytes] * config.rounds
    assert result.summary["uploaded_params"] == 2 * TINY_TEXT_WIDTH
    assert result.summary["trainable_params"] == 4 * TINY_TEXT_WIDTH


TINY_TEXT_WIDTH = 64


def test_one_client_training_leaves_the_others_personal_state_alone(fake_data_root, tmp_path):
    """Client 0 alone in the last round: the other clients' personal state must be what
    they had after the round before."""
    from benchmark.backbone import load_backbone
    from benchmark.federation.simulator import FederatedSimulator, FederationSettings
    from benchmark.runs.preparation import build_seeded_method, load_run_dataset

    config = tiny_config(fake_data_root, tmp_path, method="test_split_prompt")
    backbone = load_backbone(TINY, None)
    dataset = load_run_dataset(config, backbone)
    partition = get_protocol("base2novel").partition(dataset, config)
    runs = {}
    for schedule in ([[0, 1, 2]], [[0, 1, 2], [0]]):
        method = build_seeded_method(config, backbone)
        sim = FederatedSimulator(
            method,
            dataset.train,
            dataset.train.labels,
            dataset.class_names,
            partition.clients,
            schedule,
            config.seed,
            FederationSettings(batch_size=8),
            progress=False,
        )
        runs[len(schedule)] = sim.run().client_states
    for cid in (1, 2):
        assert torch.equal(runs[1][cid]["personal_ctx"], runs[2][cid]["personal_ctx"])
    assert not torch.equal(runs[1][0]["personal_ctx"], runs[2][0]["personal_ctx"])


def test_state_bytes_counts_tensor_storage():
    state = {"a": torch.zeros(3, 4), "b": torch.zeros(5, dtype=torch.float16)}
    assert state_bytes(state) == 3 * 4 * 4 + 5 * 2


def test_base2novel_metrics_use_the_right_images_and_classes(fake_data_root, tiny_backbone, tmp_path):
    from benchmark.runs.preparation import load_run_dataset

    config = tiny_config(fake_data_root, tmp_path)
    dataset = load_run_dataset(config, tiny_backbone)
    protocol = get_protocol("base2novel")
    partition = protocol.partition(dataset, config)
    assert partition.base_class_ids == tuple(range(6)) and partition.novel_class_ids == tuple(range(6, 12))
    calls = []

    def recording_accuracy(indices, class_ids):
        calls.append((list(indices), tuple(class_ids)))
        return 50.0

    labels = dataset.test.labels
    client = partition.clients[2]
    metrics = client_metrics_with(recording_accuracy, protocol, client, partition, dataset)
    (local_idx, local_cls), (base_idx, base_cls), (novel_idx, novel_cls) = calls
    assert set(metrics) == {"Local", "Base", "Novel"}
    assert {labels[i] for i in local_idx} == set(client.class_ids) and local_cls == partition.base_class_ids
    assert sorted(base_idx) == [i for i, y in enumerate(labels) if y < 6] and base_cls == tuple(range(6))
    assert sorted(novel_idx) == [i for i, y in enumerate(labels) if y >= 6] and novel_cls == tuple(range(6, 12))


# The second run of the same-seed test, in a fresh process: nothing this process holds (the
# frozen-feature cache, RNG states, loaded modules) can make the two runs agree.
SECOND_RUN = """
import sys

import torch

from benchmark.config import build_config, load_yaml
from benchmark.runs.runner import run_experiment

torch.set_num_threads(int(sys.argv[3]))  # the first run's: CPU arithmetic may depend on it
result = run_experiment(build_config(load_yaml(sys.argv[1])), write=False, progress=False)
torch.save({"metrics": result.summary["metrics"], "states": result.federation.client_states}, sys.argv[2])
"""


def test_same_seed_same_numbers_and_run_folder(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, method="promptfl", method_args={"lr": 0.05})
    # Earlier tests leave features in this process's cache, asked for in other batches (CI
    # once failed here so): fill it one image at a time, the batches furthest from a run's.
    held = prepare_run(config, progress=False, train_features=False)
    for split in (held.dataset.train, held.dataset.test):
        for i in range(len(split)):
            preparation.SHARED_FEATURES.features(held.method, split, [i])
    first = run_experiment(config, progress=False)
    saved = tmp_path / "second.pt"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SECOND_RUN,
            str(first.run_dir / "config.yaml"),
            str(saved),
            str(torch.get_num_threads()),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    second = torch.load(saved)
    assert first.summary["metrics"] == second["metrics"]
    assert sorted(second["states"]) == sorted(first.federation.client_states) == [0, 1, 2]
    for cid, state in first.federation.client_states.items():
        assert torch.equal(state["ctx"], second["states"][cid]["ctx"])
    run_dir = first.run_dir
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "clients.pt",  # the scored clients' states (`fedbench evaluate`)
        "config.yaml",
        "environment.json",
        "metrics.csv",
        "partition.csv",
        "partition.json",
        "partition.png",
        "summary.json",
        "timing.json",
    ]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(summary["metrics"]) == {"Local", "Base", "Novel", "HM"}
    assert summary["uploaded_params"] == 16 * TINY_TEXT_WIDTH
    env = json.loads((run_dir / "environment.json").read_text())
    assert env["packages"]["torch"] and "git_commit" in env["code"]
    assert not list(run_dir.parent.glob(".*partial"))


def test_different_seed_changes_the_initialization(fake_data_root, tmp_path):
    a = run_experiment(tiny_config(fake_data_root, tmp_path, method="promptfl", seed=1), write=False, progress=False)
    b = run_experiment(tiny_config(fake_data_root, tmp_path, method="promptfl", seed=2), write=False, progress=False)
    assert not torch.equal(a.federation.client_states[0]["ctx"], b.federation.client_states[0]["ctx"])


def test_a_failed_run_leaves_no_run_folder(fake_data_root, tmp_path, monkeypatch):
    import benchmark.runs.results as results

    config = tiny_config(fake_data_root, tmp_path, method="zeroshot")
    monkeypatch.setattr(results, "environment", lambda *args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        run_experiment(config, progress=False)
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_console_script_is_installed():
    exe = shutil.which("fedbench", path=str(__import__("pathlib").Path(sys.executable).parent))
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "run" in done.stdout and "methods" in done.stdout


def test_cli_run_prints_the_table_and_writes_the_run(fedbench, fake_data_root, tmp_path):
    out = tmp_path / "runs"
    done = fedbench(
        "run",
        "--method",
        "promptfl",
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
        "--rounds",
        "1",
        "--local-epochs",
        "1",
        "--clients",
        "2",
        "--lr",
        "0.01",
        "--wandb",
        "disabled",
    )
    assert done.returncode == 0, done.stderr
    assert "| promptfl" in done.stdout and "Local" in done.stdout and "HM" in done.stdout
    (run_dir,) = out.iterdir()
    config = (run_dir / "config.yaml").read_text()
    assert "lr: 0.01" in config and "rounds: 1" in config


def test_cli_methods_lists_both_builtins(fedbench):
    done = fedbench("methods")
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines() if line.strip()]
    assert "zeroshot" in names and "promptfl" in names


def test_cli_errors_say_what_to_do(fedbench, fake_data_root, tmp_path):
    nope = fedbench("run", "--method", "nope", "--backbone", TINY, "--pretrained", "none")
    assert nope.returncode == 2 and "unknown method 'nope'" in nope.stderr and "fedbench methods" in nope.stderr
    assert "Traceback" not in nope.stderr
    missing = fedbench(
        "run",
        "--method",
        "zeroshot",
        "--dataset",
        "dtd",
        "--backbone",
        TINY,
        "--pretrained",
        "none",
        "--data-root",
        str(tmp_path / "empty"),
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert str(tmp_path / "empty" / "dtd") in missing.stderr and "--data-root" in missing.stderr
    bad_weights = fedbench("run", "--method", "zeroshot", "--backbone", TINY, "--pretrained", "/no/such/file.pt")
    assert bad_weights.returncode == 2 and "/no/such/file.pt" in bad_weights.stderr


def test_config_precedence_defaults_yaml_flags(tmp_path):
    from benchmark.cli import build_parser
    from benchmark.cli.args import config_from_args

    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("rounds: 7\nseed: 0\nmethod: promptfl\nmethod_args:\n  lr: 0.1\n  n_ctx: 8\n")
    args, extra = build_parser().parse_known_args(["run", "--config", str(yaml_file), "--seed", "3", "--lr", "0.2"])
    args.extra = extra
    config = config_from_args(args)
    assert (config.rounds, config.seed, config.local_epochs) == (7, 3, 2)
    assert config.method_args == {"lr": 0.2, "n_ctx": 8}
