"""`fedbench tune` on a method of your own (a plugin file) and on a part of a table: the
choice is made, and the table's own tuning record is never written over."""

from __future__ import annotations

import pytest
import yaml
from conftest import write_mini_preset as write_preset
from test_tuning import SMALL_SEARCH, trials

from benchmark import registry

# A plugin as a new user writes one: PromptFL under another name, with a search of two points.
RESADAPT = '''\
from benchmark.method import Choice
from benchmark.registry import register_method
from methods.promptfl import PromptFL


@register_method("resadapt")
class ResAdapt(PromptFL):
    """PromptFL under another name."""

    tunable = {"lr": Choice((0.002, 0.004))}
'''


@pytest.fixture
def resadapt(tmp_path, monkeypatch, isolated_registry):
    registry.available_methods()  # the built-ins first: a load inside the isolation would forget them
    isolated_registry(registry.METHODS).loaded = True
    monkeypatch.setattr(registry, "_FILES", {})
    path = tmp_path / "resadapt.py"
    path.write_text(RESADAPT)
    return path


def table_record(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_tuning_a_plugin_method_chooses_it_and_leaves_the_tables_record_alone(
    resadapt, tmp_path, fake_data_root, fedbench, monkeypatch
):
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"))
    monkeypatch.chdir(tmp_path)  # the defaults: runs/mini/tuning and results/mini
    record = tmp_path / "results" / "mini"
    record.mkdir(parents=True)
    (record / "tuned.yaml").write_text("table: mini\nvalues:\n  promptfl: {lr: 0.002}\n")
    (record / "tuning.csv").write_text("method,trial\npromptfl,0\n")
    before = table_record(record)

    done = fedbench("tune", preset, "--methods", resadapt, *SMALL_SEARCH)
    assert done.returncode == 0, done.stderr
    assert "every trial of" not in done.stderr
    assert table_record(record) == before  # the table's record is untouched
    subset = tmp_path / "runs" / "mini" / "tuning" / "subset-tuning"
    assert f"its studies and choices go to {subset.relative_to(tmp_path)}, not results/mini" in done.stdout
    chosen = yaml.safe_load((subset / "tuned.yaml").read_text())
    assert list(chosen["values"]) == ["resadapt"] and chosen["values"]["resadapt"]["lr"] in (0.002, 0.004)
    assert sorted(set(trials(subset)["method"])) == ["resadapt"]
    # and the table takes its choice: `reproduce --methods resadapt --tuned` with that record
    planned = fedbench(
        "reproduce", preset, "--methods", resadapt, "--tuned", "--results", subset, "--dry-run", "--cells"
    )
    assert planned.returncode == 0, planned.stderr
    assert "resadapt | dtd | - | - | seed 1 | to run" in planned.stdout
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning_studies import load_tuned

    (cell,) = load_preset(str(preset)).with_tuned(load_tuned(subset / "tuned.yaml")).cells(methods=["resadapt"])
    assert cell.hyperparameters == "tuned" and cell.config.method_args["lr"] == chosen["values"]["resadapt"]["lr"]


def test_tuned_values_carry_their_schedule_and_studies_under_another_are_named_once(
    resadapt, tmp_path, fake_data_root, fedbench, monkeypatch
):
    from benchmark.method import Choice
    from methods.promptfl import PromptFL

    monkeypatch.setattr(PromptFL, "tunable", {"lr": Choice((0.002,))})  # one point: a search of one trial
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"))
    common = ("--out", tmp_path / "runs", "--results", tmp_path / "results", *SMALL_SEARCH)
    first = fedbench("tune", preset, "--methods", "promptfl", "--set", "local_epochs=2", *common)
    assert first.returncode == 0, first.stderr
    # the schedule the values were chosen under is recorded typed, and --tuned holds a table to it
    results = tmp_path / "results"
    chosen = yaml.safe_load((results / "tuned.yaml").read_text())
    assert chosen["selection"]["run_options"] == {"local_epochs": 2}
    reproduce = ("reproduce", preset, "--out", tmp_path / "runs", "--results", results, "--tuned", "--dry-run")
    refused = fedbench(*reproduce)
    assert refused.returncode == 2
    assert (
        f"the values in {results / 'tuned.yaml'} were chosen under local_epochs=2; this table runs with local_epochs=1"
        in refused.stderr
    )
    assert "--set local_epochs=2" in refused.stderr and "--accept-tuned-options" in refused.stderr
    assert fedbench(*reproduce, "--set", "local_epochs=2").returncode == 0
    accepted = fedbench(*reproduce, "--accept-tuned-options")
    assert accepted.returncode == 0 and "WARNING: the values in" in accepted.stderr

    # promptfl's study differs from what the table's schedule runs: left out of the outputs, said once
    done = fedbench("tune", preset, "--methods", resadapt, *common)
    assert done.returncode == 0, done.stderr
    left_out = [line for line in done.stdout.splitlines() if "ran under other settings" in line]
    assert len(left_out) == 1 and "(promptfl)" in left_out[0]


def test_a_tuning_record_of_another_table_is_not_written_over(tmp_path, fake_data_root, fedbench):
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"))
    results = tmp_path / "results"
    results.mkdir()
    (results / "tuned.yaml").write_text("table: toy\nvalues: {}\n")
    done = fedbench("tune", preset, "--out", tmp_path / "runs", "--results", results, *SMALL_SEARCH)
    assert done.returncode == 2
    assert "holds the tuning of table 'toy', not 'mini': pass another --results folder" in done.stderr
    assert sorted(p.name for p in results.iterdir()) == ["tuned.yaml"]


@pytest.mark.parametrize("command", ["tune", "reproduce"])
def test_another_shipped_tables_folder_is_refused_as_results(command, tmp_path, fedbench):
    """Issue 60's walk: `tune toy --methods resadapt ... --results results/toy_baselines` wrote
    toy's tuning.db, tuned.yaml, tuning.csv/md/png among toy_baselines' shipped files (exit 0,
    `git status` not clean); `reproduce toy --results results/toy_baselines` would render over
    that table. The folder is the checkout's, named as the user would type it."""
    from pathlib import Path

    shipped = Path(__file__).resolve().parents[2] / "results" / "toy_baselines"
    before = sorted(p.name for p in shipped.iterdir())
    flags = ["--seeds", "101", "102"] if command == "tune" else ["--dry-run"]
    done = fedbench(command, "toy", "--methods", "zeroshot", "--out", tmp_path / "runs", "--results", shipped, *flags)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert (
        f"--results {shipped} is the folder of table 'toy_baselines' (its shipped files), not of 'toy'" in done.stderr
    )
    assert sorted(p.name for p in shipped.iterdir()) == before and not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("recorded", "flags", "refused"),
    [
        ("{rounds: '1'}", (), False),  # a record from before options were typed: text, read as a run reads it
        ("{rounds: '1'}", ("--set", "rounds=1"), False),
        ("{}", ("--set", "rounds=1"), False),  # the table's own rounds, said again
        ("{rounds: '1'}", ("--set", "rounds=2"), True),
        ("{}", ("--set", "rounds=2"), True),
    ],
)
def test_tuned_values_apply_only_under_the_schedule_they_were_chosen_under(
    tmp_path, fake_data_root, fedbench, recorded, flags, refused
):
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"), rounds=1)
    results = tmp_path / "results"
    results.mkdir()
    (results / "tuned.yaml").write_text(
        f"table: mini\nselection:\n  run_options: {recorded}\nvalues:\n  promptfl: {{lr: 0.004}}\n"
    )
    done = fedbench(
        "reproduce", preset, "--out", tmp_path / "runs", "--results", results, "--tuned", "--dry-run", *flags
    )
    assert done.returncode == (2 if refused else 0), done.stderr
    assert ("were chosen under rounds=1; this table runs with rounds=2" in done.stderr) == refused
