"""`fedbench reproduce TABLE --check` answers 3 for what a real `reproduce` stops on before its
first cell: weights that are neither cached nor downloadable now (offline) included. A fresh-clone
walk of issue 50 had `--check --datasets dtd` exit 0 offline while `reproduce` exited 2 at once."""

from __future__ import annotations

import pytest

from benchmark import backbone_weights


@pytest.fixture
def offline_without_weights(monkeypatch):
    # Whatever this machine has cached: the preset's weights are not here, and the hub is off.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(backbone_weights, "_hub_cached", lambda name, tag: False)
    monkeypatch.setattr(backbone_weights, "_checkpoint_file", lambda name, tag: None)


def test_check_exits_3_when_the_weights_cannot_be_had(fedbench, fake_data_root, tmp_path, offline_without_weights):
    args = ("reproduce", "base2novel", "--datasets", "dtd", "--data-root", fake_data_root, "--out", tmp_path / "runs")
    dry = fedbench(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr  # a plan, whatever it finds
    check = fedbench(*args, "--check")
    assert check.returncode == 3, check.stdout + check.stderr
    assert "cells that cannot start: weights 'openai' of 'ViT-B-16-quickgelu' are not on this machine" in check.stdout
    assert "HF_HUB_OFFLINE is set" in check.stdout
    assert "24 of the 24 cells to run cannot start" in check.stderr
    real = fedbench(*args, "--methods", "promptfl", "--seeds", "1")  # what --check foretold
    assert real.returncode == 2 and "are not on this machine" in real.stderr
    assert not (tmp_path / "runs").exists()


def test_check_exits_0_for_weights_that_need_no_download(fedbench, tmp_path, offline_without_weights):
    done = fedbench("reproduce", "toy", "--check", "--out", tmp_path / "runs")  # the toy CLIP ships with the suite
    assert done.returncode == 0, done.stderr


def test_cells_run_with_wandb_off_say_how_to_get_wandb_runs_of_them():
    """Issue 60, item 11: cells finished with W&B off never got W&B runs, and nothing said how."""
    from types import SimpleNamespace

    from benchmark.cli.commands.reproduce import untracked_note

    def cell(wandb):
        return SimpleNamespace(config=SimpleNamespace(wandb=wandb))

    note = untracked_note([cell("disabled"), cell("disabled")])
    assert note.startswith("W&B was off (--wandb disabled): these runs have no W&B record to sync later")
    assert "--force --wandb offline" in note and "`wandb sync`" in note
    assert untracked_note([cell("disabled"), cell("offline")]) == "" and untracked_note([]) == ""
