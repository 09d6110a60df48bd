"""Round checkpoints: a run stopped after any round resumes there and ends with the same
metrics.csv and summary.json, byte for byte, as a run that was never stopped."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, tiny_config

from benchmark.runs.checkpoints import checkpoint_path, sidecar_path
from benchmark.runs.identity import run_name
from benchmark.runs.runner import run_experiment

# pFedMoAP downloads other clients' uploads (the bank); partial participation makes the
# sampling position matter: what a checkpoint must carry is all exercised.
SETTINGS = dict(method="pfedmoap", rounds=4, participation=0.67, client_sampling="uniform", local_epochs=1)


def files(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in ("metrics.csv", "summary.json")}


def test_a_run_stopped_after_round_2_resumes_there_with_identical_results(fake_data_root, tmp_path, monkeypatch):
    from benchmark.federation.simulator import FederatedSimulator

    reference = run_experiment(tiny_config(fake_data_root, tmp_path / "a", **SETTINGS), progress=False)
    config = tiny_config(fake_data_root, tmp_path / "b", checkpoint_every=1, **SETTINGS)
    train = FederatedSimulator._train_client
    trained_rounds = []

    def crash_in_round_3(self, cid, round_index):
        if round_index == 2:
            raise RuntimeError("power cut")
        trained_rounds.append(round_index)
        return train(self, cid, round_index)

    monkeypatch.setattr(FederatedSimulator, "_train_client", crash_in_round_3)
    with pytest.raises(RuntimeError, match="power cut"):
        run_experiment(config, progress=False)
    run_dir = Path(config.out) / run_name(config)
    assert not run_dir.exists() and checkpoint_path(run_dir).is_file()
    assert json.loads(sidecar_path(run_dir).read_text())["round"] == 2
    monkeypatch.setattr(
        FederatedSimulator, "_train_client", lambda self, cid, r: (trained_rounds.append(r), train(self, cid, r))[1]
    )
    trained_rounds.clear()
    resumed = run_experiment(config, progress=False)
    assert set(trained_rounds) == {2, 3}  # rounds 1 and 2 came from the checkpoint
    assert files(resumed.run_dir) == files(reference.run_dir)
    assert json.loads((resumed.run_dir / "timing.json").read_text())["resumed_after_round"] == 2
    assert not checkpoint_path(run_dir).exists() and not sidecar_path(run_dir).exists()  # removed when done


def test_checkpoints_are_kept_on_request_and_a_damaged_one_restarts_the_run(fake_data_root, tmp_path):
    config = tiny_config(fake_data_root, tmp_path, checkpoint_every=2, keep_checkpoints=True, **SETTINGS)
    first = run_experiment(config, progress=False)
    kept = checkpoint_path(first.run_dir)
    assert kept.is_file() and json.loads(sidecar_path(first.run_dir).read_text())["round"] == 4
    reference = files(first.run_dir)
    kept.write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match=r"cannot be used .* the run starts from round 1"):
        again = run_experiment(config, progress=False)
    assert files(again.run_dir) == reference and again.timing["resumed_after_round"] is None


@pytest.mark.slow
def test_kill_9_at_a_random_round_then_rerun_gives_identical_files(fake_data_root, tmp_path):
    rounds = 8
    flags = [
        "--method",
        "pfedmoap",
        "--dataset",
        "dtd",
        "--backbone",
        TINY,
        "--pretrained",
        "none",
        "--data-root",
        str(fake_data_root),
        "--shots",
        "4",
        "--rounds",
        str(rounds),
        "--local-epochs",
        "1",
        "--clients",
        "3",
        "--batch-size",
        "8",
        "--participation",
        "0.67",
        "--client-sampling",
        "uniform",
        "--wandb",
        "offline",
    ]
    command = [sys.executable, "-m", "benchmark.cli", "run", *flags]
    reference = subprocess.run([*command, "--out", str(tmp_path / "a")], capture_output=True, text=True, timeout=900)
    assert reference.returncode == 0, reference.stderr
    (reference_dir,) = [p for p in (tmp_path / "a").iterdir() if p.name.startswith("pfedmoap_")]

    out = tmp_path / "b"
    kill_after = random.randint(1, rounds - 2)
    process = subprocess.Popen(
        [*command, "--out", str(out), "--checkpoint-every", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    sidecar = sidecar_path(out / reference_dir.name)
    deadline = time.time() + 600
    while time.time() < deadline and process.poll() is None:
        try:
            if json.loads(sidecar.read_text())["round"] >= kill_after:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    saved = json.loads(sidecar.read_text())["round"]
    print(f"killed with -9 after the checkpoint of round {saved} (aimed at {kill_after}) of {rounds}")
    assert saved < rounds and not (out / reference_dir.name).exists()

    resumed = subprocess.run(
        [*command, "--out", str(out), "--checkpoint-every", "1"], capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming {reference_dir.name} after round" in resumed.stdout
    assert files(out / reference_dir.name) == files(reference_dir)
    assert not checkpoint_path(out / reference_dir.name).exists()
    # The W&B run was resumed, not duplicated: both attempts logged under one run id.
    ids = {p.name.rsplit("-", 1)[-1] for p in (out / "wandb").glob("offline-run-*")}
    assert len(ids) == 1


def test_a_stop_signal_saves_the_last_completed_round(fake_data_root, tmp_path, monkeypatch):
    """With the default timed checkpoints none is due in a short run, but SIGTERM in round 3
    still leaves round 2 saved, and the rerun resumes there."""
    import signal as signals

    from benchmark.errors import RunInterrupted
    from benchmark.federation.simulator import FederatedSimulator

    reference = run_experiment(tiny_config(fake_data_root, tmp_path / "a", **SETTINGS), progress=False)
    config = tiny_config(fake_data_root, tmp_path / "b", **SETTINGS)
    assert config.checkpoint_every == -1
    train = FederatedSimulator._train_client

    def stopped_in_round_3(self, cid, round_index):
        if round_index == 2:
            raise RunInterrupted(signals.SIGTERM)
        return train(self, cid, round_index)

    monkeypatch.setattr(FederatedSimulator, "_train_client", stopped_in_round_3)
    with pytest.raises(RunInterrupted):
        run_experiment(config, progress=False)
    run_dir = Path(config.out) / run_name(config)
    assert json.loads(sidecar_path(run_dir).read_text())["round"] == 2 and not run_dir.exists()
    monkeypatch.setattr(FederatedSimulator, "_train_client", train)
    resumed = run_experiment(config, progress=False)
    assert resumed.timing["resumed_after_round"] == 2
    assert files(resumed.run_dir) == files(reference.run_dir)
