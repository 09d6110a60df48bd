"""W&B as its users expect, checked on real offline runs decoded from their .wandb files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import TINY
from wandb_records import read_offline_run

ROOT = Path(__file__).resolve().parents[2]


def fedbench_process(*args, env=None) -> subprocess.CompletedProcess:
    """The CLI in its own process: W&B's core has flushed the run when the process exits."""
    return subprocess.run(
        [sys.executable, "-m", "benchmark.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "WANDB_MODE": "offline", **(env or {})},
        cwd=ROOT,
    )


def offline_runs(folder: Path) -> list[Path]:
    return sorted(folder.glob("wandb/offline-run-*"))


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, fake_data_root):
    tmp = tmp_path_factory.mktemp("tracked")
    wandb_dir = tmp / "wandb_home"
    done = fedbench_process(
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
        fake_data_root,
        "--out",
        tmp / "runs",
        "--shots",
        "2",
        "--rounds",
        "3",
        "--clients",
        "3",
        "--local-epochs",
        "1",
        "--wandb",
        "offline",
        "--eval-every",
        "1",
        "--n-ctx",
        "4",
        env={"WANDB_DIR": str(wandb_dir)},
    )
    assert done.returncode == 0, done.stderr
    (folder,) = offline_runs(wandb_dir)  # WANDB_DIR is honoured
    (run_dir,) = (tmp / "runs").glob("promptfl_*")
    return done, read_offline_run(folder), run_dir, folder


def test_offline_run_holds_resolved_hyperparameters_and_the_real_device(tracked_run):
    _, run, run_dir, _ = tracked_run
    from benchmark.registry import get_method, hyperparameters

    defaults = {h.name: h.default for h in hyperparameters(get_method("promptfl"))}
    assert run.config["method_args"] == {**defaults, "n_ctx": 4} and len(defaults) >= 5
    assert run.config["device"] == "cpu" and run.config["precision"] == "32-true"
    assert run.config["config_hash"] == run_dir.name.rsplit("_", 1)[1]
    assert not {"out", "data_root", "wandb"} & set(run.config)  # no local paths
    assert run.tags == ["fedbench run"] and run.exit_code == 0


def test_a_single_run_is_grouped_by_protocol_and_dataset_and_typed_by_method(tracked_run):
    _, run, _, _ = tracked_run  # no --wandb-group given
    assert (run.group, run.job_type) == ("base2novel-dtd", "promptfl")


def test_offline_run_has_the_round_axis_and_accuracy_per_round(tracked_run):
    _, run, run_dir, _ = tracked_run
    assert ("round", "") in run.metric_definitions and ("*", "round") in run.metric_definitions
    evaluated = [row for row in run.history if "HM" in row]
    assert [row["round"] for row in evaluated] == [1, 2, 3]
    metrics = pd.read_csv(run_dir / "metrics.csv")
    over_clients = metrics[metrics.client == -1]
    for row in evaluated:
        for metric in ("Local", "Base", "Novel", "HM"):
            expected = over_clients[(over_clients["round"] == row["round"]) & (over_clients.metric == metric)]["value"]
            assert row[metric] == pytest.approx(expected.item())
    keys = {key for row in run.history for key in row}
    assert not [k for k in keys if "client_" in k]  # per-client numbers live in the per_client table
    assert not [k for k in keys | set(run.summary) if k.startswith("final/")]
    assert run.summary["HM"] == pytest.approx(evaluated[-1]["HM"])


def test_offline_run_has_the_spread_across_clients_and_the_peak_memory(tracked_run):
    _, run, run_dir, _ = tracked_run
    spread = json.loads((run_dir / "summary.json").read_text())["spread"]
    assert "Local" in spread  # its clients' own classes: a different accuracy each
    for metric, entry in spread.items():
        for key, value in entry.items():
            assert run.summary[f"{metric}/{key}"] == pytest.approx(value)
    memory = json.loads((run_dir / "timing.json").read_text())["memory"]
    assert run.summary["memory/training/cpu_rss_peak_mb"] == pytest.approx(memory["training"]["cpu_rss_peak_mb"])


def test_offline_run_has_the_lr_of_each_round_s_steps(tracked_run):
    # metrics.csv has the mean step lr of every client-round; the history its mean, min and max per round.
    _, run, run_dir, _ = tracked_run
    metrics = pd.read_csv(run_dir / "metrics.csv")
    rates = metrics[metrics.metric == "lr"]
    assert sorted(set(rates["round"])) == [1, 2, 3] and sorted(set(rates.client)) == [0, 1, 2]
    logged = [row for row in run.history if "lr/mean" in row]
    assert [row["round"] for row in logged] == [1, 2, 3]
    for row in logged:
        values = rates[rates["round"] == row["round"]]["value"]
        assert row["lr/mean"] == pytest.approx(values.mean())
        assert (row["lr/min"], row["lr/max"]) == (pytest.approx(values.min()), pytest.approx(values.max()))


def test_offline_run_logs_its_folder_and_prints_how_to_sync(tracked_run):
    done, run, run_dir, folder = tracked_run
    assert (run_dir.name, "run-folder") in run.artifacts
    assert f"W&B: offline run saved in {folder}; upload it with: wandb sync {folder}" in done.stderr


def tiny_offline_run(tmp_path: Path, data_root: Path, *extra) -> subprocess.CompletedProcess:
    return fedbench_process(
        "run", "--dataset", "dtd", "--backbone", TINY, "--data-root", data_root, "--out", tmp_path / "runs",
        "--shots", "2", "--rounds", "1", "--clients", "3", "--local-epochs", "1", "--wandb", "offline", *extra,
    )  # fmt: skip


def test_a_failed_run_is_recorded_with_a_non_zero_exit_code(tmp_path, fake_data_root):
    """A run that fails once its rounds have begun (here pFedMMA diverging at lr 1e9) is a
    failed W&B run and a failed cell (NAME.failed.json)."""
    done = tiny_offline_run(
        tmp_path,
        fake_data_root,
        *("--method", "pfedmma", "--first-block", "2", "--lr", "1e9", "--pretrained", "none"),
        *("--shots", "4", "--rounds", "2"),  # as test_batched_training's diverging run (the last flag wins)
    )
    assert done.returncode == 1 and "diverged" in done.stderr, done.stderr
    (folder,) = offline_runs(tmp_path / "runs")
    assert read_offline_run(folder).exit_code == 1
    assert len(list((tmp_path / "runs").glob("pfedmma_*.failed.json"))) == 1


@pytest.mark.parametrize("why", ["damaged checkpoint", "1000 clients", "no configure_optimizers"])
def test_a_run_refused_while_it_is_built_leaves_no_wandb_run_and_no_failure(tmp_path, fake_data_root, why):
    """Issue 38: `--clients 1000` and a plugin without configure_optimizers left an offline W&B
    run and a .failed.json for a run that never trained. W&B starts with the first round."""
    damaged = tmp_path / "damaged.pt"
    damaged.write_bytes(b"not a checkpoint")  # exists, so it fails only when the backbone is built
    plugin = tmp_path / "noopt.py"
    plugin.write_text(
        "import torch\nfrom benchmark.method import FederatedMethod\n"
        "class NoOptimizer(FederatedMethod):\n"
        "    def __init__(self, backbone, scale: float = 1.0):\n"
        "        super().__init__(backbone)\n"
        "        self.bias = torch.nn.Parameter(torch.zeros(1))\n"
    )
    flags, message = {
        "damaged checkpoint": (
            ["--method", "promptfl", "--pretrained", damaged],
            f"could not load checkpoint {damaged}",
        ),
        "1000 clients": (["--method", "promptfl", "--pretrained", "none", "--clients", "1000"], "1000 clients"),
        "no configure_optimizers": (
            ["--method", f"{plugin}:NoOptimizer", "--pretrained", "none"],
            "does not override configure_optimizers",
        ),
    }[why]
    done = tiny_offline_run(tmp_path, fake_data_root, *flags)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "W&B" not in done.stderr and not offline_runs(tmp_path / "runs")
    assert not list((tmp_path / "runs").glob("*.failed.json"))


def test_reproduce_tags_runs_with_preset_filters_and_overrides(tmp_path, fake_data_root):
    preset = tmp_path / "tagged.yaml"
    preset.write_text(
        "title: Tagged\nrun: {protocol: base2novel, shots: 2, rounds: 3, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {fake_data_root}}}\n"
        "datasets: [dtd]\nmethods: [zeroshot, promptfl]\nseeds: [1]\n"
    )
    done = fedbench_process(
        "reproduce",
        preset,
        "--out",
        tmp_path / "runs",
        "--results",
        tmp_path / "results",
        "--methods",
        "zeroshot",
        "--set",
        "rounds=2",
        "--wandb",
        "offline",
    )
    assert done.returncode == 0, done.stderr
    runs = {read_offline_run(f).name: read_offline_run(f) for f in offline_runs(tmp_path / "runs")}
    table = runs.pop("table-tagged")
    assert table.config["preset"] == "tagged" and "method_args" not in table.config
    assert "table" in table.tags
    (cell,) = runs.values()
    assert cell.tags == ["preset:tagged", "methods:zeroshot", "set:rounds=2"]


def test_wandb_naming_flags_win_over_wandb_environment_variables(tmp_path, fake_data_root):
    """Flags set what they name; W&B's variables fill in the rest (and are not silently
    replaced by the suite's defaults, which come last)."""
    done = fedbench_process(
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
        fake_data_root,
        "--out",
        tmp_path / "runs",
        "--shots",
        "2",
        "--rounds",
        "1",
        "--clients",
        "3",
        "--wandb",
        "offline",
        "--wandb-project",
        "flag-project",
        "--wandb-tags",
        "ablation, first-try",
        env={
            "WANDB_PROJECT": "env-project",
            "WANDB_ENTITY": "env-entity",
            "WANDB_RUN_GROUP": "env-group",
            "WANDB_NAME": "env-name",
            "WANDB_TAGS": "env-tag",
            "WANDB_DIR": str(tmp_path / "wandb_home"),
        },
    )
    assert done.returncode == 0, done.stderr
    (folder,) = offline_runs(tmp_path / "wandb_home")
    run = read_offline_run(folder)
    assert (run.project, run.entity, run.group, run.name) == ("flag-project", "env-entity", "env-group", "env-name")
    assert run.tags == ["fedbench run", "ablation", "first-try"]  # --wandb-tags replaces $WANDB_TAGS
    assert not {"wandb_project", "wandb_tags", "wandb_name"} & set(run.config)  # naming, not settings


def test_wandb_naming_defaults_and_environment(monkeypatch, tmp_path):
    from benchmark.config import build_config
    from benchmark.runs.identity import run_name
    from benchmark.runs.tracking import run_naming

    for name in ("WANDB_PROJECT", "WANDB_ENTITY", "WANDB_RUN_GROUP", "WANDB_NAME", "WANDB_TAGS"):
        monkeypatch.delenv(name, raising=False)
    config = build_config({"method": "zeroshot", "dataset": "toy", "out": str(tmp_path)})
    assert run_naming(config, tags=("fedbench run",)) == {
        "project": "fedbench",
        "entity": None,
        "group": "base2novel-toy",
        "name": run_name(config),
        "tags": ["fedbench run"],
    }
    monkeypatch.setenv("WANDB_TAGS", "a,b,,a")
    monkeypatch.setenv("WANDB_ENTITY", "team")
    monkeypatch.setenv("WANDB_NAME", "mine")
    named = run_naming(config, tags=("fedbench run", "a"))
    assert named["tags"] == ["fedbench run", "a", "b"] and named["entity"] == "team" and named["name"] == "mine"
    assert run_naming(config, name="table-toy")["name"] == "table-toy"  # a table's run keeps its name
    flagged = build_config(
        {"method": "zeroshot", "dataset": "toy", "wandb_entity": "me", "wandb_name": "x", "wandb_tags": "c"}
    )
    assert run_naming(flagged)["entity"] == "me" and run_naming(flagged)["name"] == "x"
    assert run_naming(flagged)["tags"] == ["c"]


def test_reproduce_takes_wandb_naming_flags_and_a_group_from_the_environment(tmp_path, monkeypatch):
    from benchmark.cli import build_parser
    from benchmark.sweeps.presets import load_preset

    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    args = build_parser().parse_args(
        ["reproduce", "toy", "--wandb-project", "p", "--wandb-entity", "e", "--wandb-group", "g", "--wandb-tags", "t"]
    )
    assert (args.wandb_project, args.wandb_entity, args.wandb_group, args.wandb_tags) == ("p", "e", "g", "t")
    assert {c.config.wandb_group for c in load_preset("toy").cells()} == {"toy"}
    monkeypatch.setenv("WANDB_RUN_GROUP", "my-group")
    assert {c.config.wandb_group for c in load_preset("toy").cells()} == {"my-group"}
    assert {c.config.wandb_group for c in load_preset("toy").cells({"wandb_group": "flag"})} == {"flag"}


def test_reproduce_groups_runs_by_table_and_types_them_by_method_label(tmp_path, fake_data_root):
    """docs/run-folders.md: one W&B run per cell, grouped by table, job_type = the method's
    label (a variant's label, not its method's name); the table's own run is job_type table."""
    preset = tmp_path / "grouped.yaml"
    preset.write_text(
        "title: Grouped\nrun: {protocol: base2novel, shots: 2, rounds: 1, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {fake_data_root}}}\n"
        "datasets: [dtd]\nmethods: [zeroshot, {label: short_prompt, method: promptfl, method_args: {n_ctx: 4}}]\n"
        "seeds: [1]\n"
    )
    done = fedbench_process(
        "reproduce", preset, "--out", tmp_path / "runs", "--results", tmp_path / "results", "--wandb", "offline"
    )
    assert done.returncode == 0, done.stderr
    runs = [read_offline_run(f) for f in offline_runs(tmp_path / "runs")]
    kinds = sorted((run.group, run.job_type, run.config.get("method")) for run in runs)
    assert kinds == [
        ("grouped", "short_prompt", "promptfl"),
        ("grouped", "table", None),
        ("grouped", "zeroshot", "zeroshot"),
    ]
