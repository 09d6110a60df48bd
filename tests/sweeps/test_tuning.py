"""`fedbench tune`: equal budgets, validation data only, resumable Optuna studies, tuned tables."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY, tiny_config, write_split_zhou
from conftest import write_mini_preset as write_preset
from fake_layouts import _COOP_FILES as COOP_FILES
from fake_layouts import DOMAINBED, FAKE_NAMES, make_fake_dataset

from benchmark.method import Choice, LogUniform, Range, Uniform
from benchmark.sweeps.search import jump_limit
from data.base import LabeledImages

# The smallest search of the built-in learning-rate ranges (2.5 decades): a grid of one point a
# decade (the paper default, its tenth and two steps up to 30x), no refinement, no extension: 4 trials.
SMALL_SEARCH = ("--points-per-decade", "1", "--refinements", "0", "--extensions", "0", "--seeds", "101", "102")


def tune_args(tmp: Path, preset: Path, *extra) -> list[str]:
    return [
        "tune",
        str(preset),
        "--out",
        str(tmp / "runs" / "tuning"),
        "--results",
        str(tmp / "results"),
        *SMALL_SEARCH,
        *extra,
    ]


@pytest.fixture
def no_curves_figure(monkeypatch):
    """`fedbench tune` rewrites tuning.png after every trial (about a second of matplotlib
    each on the 2-core machine, most of a test that runs dozens of trials); the tests that
    count trials and read tuning.csv do without it. The figure itself is checked in
    test_tuning_md_and_png_show_every_methods_curve."""
    import benchmark.sweeps.tuning_report as tuning_report

    monkeypatch.setattr(tuning_report, "plot_curves", lambda plan, searches, path: None)


def trials(results: Path) -> pd.DataFrame:
    return pd.read_csv(results / "tuning.csv")


def forbid_test_split(monkeypatch) -> None:
    """Reading any image of a test split raises, whatever its source: every image source is a
    `LabeledImages` subclass (files, tensors, subsets, concatenations), and each one's `load` is
    wrapped. The process's frozen-feature cache starts empty, so no earlier test's features
    can hide a read. (Independent of the suite's own seal, `data.validation`.)"""
    import benchmark.runs.preparation as preparation
    from benchmark.federation.features import FeatureCache

    monkeypatch.setattr(preparation, "SHARED_FEATURES", FeatureCache())

    def forbid(original):
        def load(self, index):
            if self.name.endswith("/test"):
                raise AssertionError(f"read test image {index} of {self.name}")
            return original(self, index)

        return load

    classes, todo = set(), [LabeledImages]
    while todo:
        cls = todo.pop()
        classes.add(cls)
        todo.extend(cls.__subclasses__())
    for cls in classes:
        if "load" in cls.__dict__:
            monkeypatch.setattr(cls, "load", forbid(cls.__dict__["load"]))


@pytest.fixture
def test_split_forbidden(monkeypatch):
    forbid_test_split(monkeypatch)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, fake_data_root):
    """promptfl and clip_adapter tuned with 4 trials each (zeroshot has nothing to tune)."""
    from benchmark.cli import main

    tmp = tmp_path_factory.mktemp("tune")
    preset = write_preset(tmp, fake_data_root, methods=("zeroshot", "promptfl", "clip_adapter"))
    with pytest.MonkeyPatch.context() as monkeypatch:
        forbid_test_split(monkeypatch)  # tuning must finish without reading one test image
        assert main(tune_args(tmp, preset)) == 0
    return tmp, preset


def test_the_forbidden_test_split_really_bites(fake_data_root, tmp_path, test_split_forbidden):
    # The guard used while tuning stops an ordinary (test-split) run: so tuning passing under it means
    # tuning never read a test image.
    from benchmark.runs.runner import run_experiment

    with pytest.raises(AssertionError, match="read test image"):
        run_experiment(tiny_config(fake_data_root, tmp_path, method="zeroshot"), write=False, progress=False)


def test_tuning_reads_validation_only_and_records_it(tuned):
    tmp, _ = tuned  # the fixture tuned under the guard above
    folders = sorted((tmp / "runs" / "tuning").glob("*_seed*_*"))
    for seed in (101, 102):  # the preset lists seed 1 only: the tuning seeds are 101 and 102
        assert len([f for f in folders if f"_seed{seed}_" in f.name]) == 8  # 2 methods x 4 trials, zeroshot not tuned
    assert len(folders) == 16
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["eval_split"] == "val"
        manifest = json.loads((folder / "partition.json").read_text())
        validation = manifest["validation"]  # the fake layout has no "val" entries: held out of train
        assert validation["source"].startswith("held-out part of train") and validation["holdout_train_indices"]


def test_tuning_csv_holds_every_trial_and_the_choice(tuned):
    tmp, _ = tuned
    frame = trials(tmp / "results")
    assert sorted(frame["method"].unique()) == ["clip_adapter", "promptfl"]
    for method, rows in frame.groupby("method"):
        assert list(rows["trial"]) == [0, 1, 2, 3] and set(rows["state"]) == {"COMPLETE"}
        assert set(rows["phase"]) == {"grid"}
        assert rows.iloc[0]["param_lr"] == pytest.approx({"promptfl": 0.002, "clip_adapter": 0.002}[method])  # paper
        assert sorted(rows["param_lr"]) == pytest.approx([0.0002, 0.002, 0.002 * 30**0.5, 0.06])  # the grid
        best = rows[rows["chosen"]]
        assert len(best) == 1 and best["smoothed"].notna().all()
        # the objective is the mean over the tuning seeds; every seed's value is in the csv
        assert list(rows["value"]) == pytest.approx(list((rows["value_seed101"] + rows["value_seed102"]) / 2))
        assert list(rows["val_HM"]) == pytest.approx(list(rows["value"]), abs=1e-3)  # one dataset: the same mean
        assert list(rows["val_HM_seed102"]) == pytest.approx(list(rows["value_seed102"]), abs=1e-3)
    chosen = yaml.safe_load((tmp / "results" / "tuned.yaml").read_text())
    assert (
        chosen["command"].startswith("fedbench tune ") and "--points-per-decade 1 --refinements 0" in chosen["command"]
    )
    assert chosen["selection"]["metric"] == "HM" and chosen["selection"]["split"] == "validation"
    assert chosen["selection"]["seeds"] == [101, 102] and "--seeds 101 102" in chosen["command"]
    for method in ("promptfl", "clip_adapter"):
        row = frame[(frame.method == method) & frame.chosen]
        assert chosen["values"][method]["lr"] == pytest.approx(row["param_lr"].item())
        scores = chosen["validation"][method]
        # the choice scores within the measured noise of the best point it tried
        assert scores["tuned"] >= scores["best_point"] - jump_limit(scores["noise"]) - 1e-3


def test_tuning_a_finished_search_again_runs_nothing_and_states_its_wall_time(tuned, capsys):
    from benchmark.cli import main

    tmp, preset = tuned
    before = sorted((tmp / "runs" / "tuning").glob("*_seed*_*"))
    assert main(tune_args(tmp, preset)) == 0
    printed = capsys.readouterr().out
    assert sorted((tmp / "runs" / "tuning").glob("*_seed*_*")) == before  # every method's budget is spent
    assert "chosen promptfl: lr=" in printed and "chosen clip_adapter: lr=" in printed
    assert re.search(r"\(wall time of this process: \d+ min \d+ s\)", printed), printed
    # Issue 60: the finished trials were reused without a word.
    for method in ("promptfl", "clip_adapter"):
        assert (
            f"{method}: 4 of 4 trials were already done ({tmp / 'results' / 'tuning.db'}); they are not run again"
            in printed
        )


def test_a_trial_whose_runs_are_done_says_it_read_them(tuned, capsys, monkeypatch):
    """A fresh study (another --results) over the same --out: every trial's runs exist, and
    each trial's line says they were read, not run (issue 60: a reused cell got no line)."""
    import benchmark.runs.runner as runner
    from benchmark.cli import main

    tmp, preset = tuned
    monkeypatch.setattr(runner, "run_experiment", lambda *a, **k: pytest.fail("a finished run was run again"))
    assert main([*tune_args(tmp, preset)[:5], str(tmp / "results-again"), *SMALL_SEARCH]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\w+ trial \d+/4 ", line)]
    assert len(lines) == 8 and all(
        line.endswith("(validation; 2 runs were already done: read, not run)") for line in lines
    )


def test_same_trial_budget_and_schedule_for_every_method(tuned):
    tmp, _ = tuned
    configs = [yaml.safe_load((f / "config.yaml").read_text()) for f in (tmp / "runs" / "tuning").glob("*_seed*_*")]
    schedule = {(c["rounds"], c["local_epochs"], c["clients"], c["shots"], c["batch_size"]) for c in configs}
    assert len(schedule) == 1
    for method in ("promptfl", "clip_adapter"):  # every method's every trial ran at both tuning seeds
        seeds = pd.Series([c["seed"] for c in configs if c["method"] == method]).value_counts()
        assert dict(seeds) == {101: 4, 102: 4}
    counts = trials(tmp / "results").groupby("method").size()
    assert counts.nunique() == 1


def test_reproduce_tuned_applies_the_choice_and_marks_rows(tuned, fedbench):
    tmp, preset = tuned
    done = fedbench("reproduce", preset, "--out", tmp / "runs", "--results", tmp / "results", "--tuned")
    assert done.returncode == 0, done.stderr
    chosen = yaml.safe_load((tmp / "results" / "tuned.yaml").read_text())["values"]
    for method in ("promptfl", "clip_adapter"):
        (folder,) = (tmp / "runs").glob(f"{method}_*")
        config = yaml.safe_load((folder / "config.yaml").read_text())
        assert config["method_args"]["lr"] == pytest.approx(chosen[method]["lr"])
        assert config["eval_split"] == "test"
    table = (tmp / "results" / "table.md").read_text()
    assert "| promptfl | tuned |" in table and "| zeroshot | paper |" in table
    assert "Tuned rows use the values chosen by" in table
    recorded = yaml.safe_load((tmp / "results" / "tuned.yaml").read_text())["command"]
    assert f"chosen by `{recorded}`" in table and "chosen by `see " not in table  # issue 60, item 11
    # the budget every method got is stated with the table (grid density, refinements, seeds)
    assert "Tuning budget, the same for every tuned method: a grid of 1 points per decade" in table
    assert "then 0 refinements" in table and "seeds 101, 102" in table
    stats = pd.read_csv(tmp / "results" / "table.csv")
    assert set(stats[stats.label == "promptfl"]["hyperparameters"]) == {"tuned"}
    flags = yaml.safe_load((tmp / "results" / "tuned.yaml").read_text()).get("flags", {})
    for label, reason in flags.items():  # a flagged choice is marked in the table with its reason
        assert f"¶ tuning: {label} (tuned)" in table and reason in table


def test_tuning_md_and_png_show_every_methods_curve(tuned):
    tmp, _ = tuned
    report = (tmp / "results" / "tuning.md").read_text()
    frame = trials(tmp / "results")
    for method in ("promptfl", "clip_adapter"):
        assert f"## {method}" in report
        chosen = frame[(frame.method == method) & frame.chosen].iloc[0]
        assert f"| lr={chosen.param_lr:.4g} | {chosen.value:.2f} |" in report  # the summary row
    assert "Noise: one point's HM has a standard error of" in report
    assert (tmp / "results" / "tuning.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reproduce_tuned_without_tuning_says_what_to_run(tmp_path, fake_data_root, fedbench):
    preset = write_preset(tmp_path, fake_data_root)
    done = fedbench("reproduce", preset, "--results", tmp_path / "nothing", "--tuned", "--dry-run")
    assert done.returncode == 2
    assert "run `fedbench tune` on this table first" in done.stderr


def test_a_different_schedule_cannot_continue_a_study(tuned, fedbench):
    tmp, preset = tuned
    done = fedbench(*tune_args(tmp, preset, "--set", "rounds=2"))
    assert done.returncode == 2
    assert "made under other settings" in done.stderr and "rounds" in done.stderr
    assert len(trials(tmp / "results")) == 8  # nothing was added or lost


def test_a_study_is_keyed_on_the_identity_of_the_cells_it_runs(tuned):
    from benchmark.runs.identity import cell_identity
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning_plan import plan_tuning

    tmp, preset = tuned
    plan = plan_tuning(load_preset(str(preset)), tmp / "results", {"out": str(tmp / "runs" / "tuning")})
    (variant,) = [v for v in plan.variants if v.label == "promptfl"]
    code = plan.identity(variant)["code"]
    cell = cell_identity(plan.cells(variant, {})[0].config)
    assert code["method"] == [cell["method"]] and code["framework"] == [cell["framework"]]
    assert code["weights"] == [cell["weights"]] and code["data"] == [cell["data"]]


@pytest.mark.parametrize("part", ["method", "framework"])
def test_a_study_is_not_continued_after_its_method_or_the_framework_changed(tuned, fedbench, monkeypatch, part):
    # As if methods/promptfl.py (or the simulator, the optimizer schedules, ...) had been edited
    # since the study's trials ran: the cells' identity changes, so the study must not go on.
    import benchmark.runs.identity as identity

    tmp, preset = tuned
    if part == "framework":
        # one more module in the run's flow hashes as an edit of the framework code would
        monkeypatch.setattr(identity, "FRAMEWORK_ROOTS", (*identity.FRAMEWORK_ROOTS, "benchmark.sweeps.tables"))
        reason = "the framework code changed since its trials ran"
    else:
        real = identity.method_version
        monkeypatch.setattr(identity, "method_version", lambda name: {**real(name), "source_sha256": "edited"})
        reason = "the method's source changed since its trials ran"
    done = fedbench(*tune_args(tmp, preset))
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert reason in message and "scored another version of the method" in message
    assert "Start a new study: pass another --results folder" in message
    assert len(trials(tmp / "results")) == 8  # nothing was added or lost


def test_interrupted_tuning_resumes_without_repeating_trials(
    tmp_path, fake_data_root, monkeypatch, fedbench, no_curves_figure
):
    """A trial interrupted mid-run (as by Ctrl-C or a kill) is redone; finished ones are not;
    and the resumed search proposes what an uninterrupted one does."""
    import benchmark.runs.runner as runner

    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))
    real = runner.run_experiment
    calls = []
    interrupt_at = [5]  # the third trial's first run (each trial runs seeds 101 and 102)

    def interrupt_on_third(config, *args, **kwargs):
        calls.append(config.method_args["lr"])
        if len(calls) == interrupt_at[0]:
            raise KeyboardInterrupt
        return real(config, *args, **kwargs)

    monkeypatch.setattr(runner, "run_experiment", interrupt_on_third)
    killed = tmp_path / "killed"
    assert fedbench(*tune_args(killed, preset)).returncode == 130
    import optuna

    study = optuna.load_study(study_name="promptfl", storage=f"sqlite:///{killed / 'results' / 'tuning.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "RUNNING"]
    first_two = [(t.params["lr"], t.value) for t in study.trials[:2]]

    calls.clear()
    interrupt_at[0] = None
    done = fedbench(*tune_args(killed, preset))
    assert done.returncode == 0, done.stderr
    assert len(calls) == 4  # the interrupted trial and the last one (2 seeds each); finished ones are not rerun
    assert "trial 2 was interrupted; it will be run again" in done.stdout
    frame = trials(killed / "results")
    assert list(frame["state"]) == ["COMPLETE", "COMPLETE", "INTERRUPTED", "COMPLETE", "COMPLETE"]
    finished = frame[frame.state == "COMPLETE"]
    assert [(r.param_lr, r.value) for r in finished.head(2).itertuples()] == first_two

    calls.clear()
    straight = tmp_path / "straight"
    assert fedbench(*tune_args(straight, preset)).returncode == 0
    assert len(calls) == 8
    uninterrupted = trials(straight / "results")
    assert list(uninterrupted["param_lr"]) == list(finished["param_lr"])
    assert list(uninterrupted["value"]) == list(finished["value"])
    resumed, whole = (yaml.safe_load((f / "results" / "tuned.yaml").read_text()) for f in (killed, straight))
    assert resumed["values"] == whole["values"] and resumed.get("flags") == whole.get("flags")
    for scores in (resumed["validation"]["promptfl"], whole["validation"]["promptfl"]):
        scores.pop("trial")  # Optuna's trial number counts the interrupted trial too
    assert resumed["validation"] == whole["validation"]


def test_a_search_killed_between_queueing_a_trial_and_starting_it_resumes(
    tmp_path, fake_data_root, monkeypatch, fedbench, no_curves_figure
):
    """Killed after a point is queued and before it starts (a WAITING trial, which Optuna
    cannot fail as it is): the resume fails it, runs that point, and proposes what an
    uninterrupted search does (the slow SIGKILL test once landed here)."""
    import optuna

    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))
    real_ask, asked, die_at = optuna.Study.ask, [], [3]

    def ask_or_die(self, *args, **kwargs):
        asked.append(1)
        if len(asked) == die_at[0]:
            raise KeyboardInterrupt
        return real_ask(self, *args, **kwargs)

    monkeypatch.setattr(optuna.Study, "ask", ask_or_die)
    killed = tmp_path / "killed"
    assert fedbench(*tune_args(killed, preset)).returncode == 130
    study = optuna.load_study(study_name="promptfl", storage=f"sqlite:///{killed / 'results' / 'tuning.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "WAITING"]

    die_at[0] = None
    done = fedbench(*tune_args(killed, preset))
    assert done.returncode == 0, done.stderr
    assert "trial 2 was queued but not started; it will be run again" in done.stdout
    resumed = trials(killed / "results")
    assert list(resumed["state"]) == ["COMPLETE", "COMPLETE", "INTERRUPTED", "COMPLETE", "COMPLETE"]
    assert fedbench(*tune_args(tmp_path / "straight", preset)).returncode == 0
    whole = trials(tmp_path / "straight" / "results")
    finished = resumed[resumed.state == "COMPLETE"]
    assert list(finished["param_lr"]) == list(whole["param_lr"])
    assert list(finished["value"]) == list(whole["value"])


def test_trials_run_round_robin_so_an_interrupted_search_leaves_budgets_at_most_one_apart(
    tmp_path, fake_data_root, monkeypatch, no_curves_figure
):
    """docs/protocols.md: trials run round-robin over the methods, so an interrupted search
    leaves budgets that differ by at most one; resuming it serves the methods behind first.
    A 3-method, 4-trial search interrupted (as by Ctrl-C) in a trial of each method."""
    from types import SimpleNamespace

    import optuna

    import benchmark.runs.runner as runner
    from benchmark.cli import main

    methods = ("promptfl", "clip_adapter", "fedpgp")
    ran, stop_at = [], [None]

    def known_scores(config, *args, **kwargs):  # a run whose validation HM is known, nothing trained
        ran.append(config.method)
        if len(ran) == stop_at[0]:
            raise KeyboardInterrupt
        hm = 50.0 + config.method_args["lr"]
        return SimpleNamespace(
            summary={"eval_split": "val", "metrics": {"Local": hm, "Base": hm, "Novel": hm, "HM": hm}}
        )

    monkeypatch.setattr(runner, "run_experiment", known_scores)
    preset = write_preset(tmp_path, fake_data_root, methods=methods)

    def finished(folder: Path) -> dict[str, int]:
        storage = f"sqlite:///{folder / 'results' / 'tuning.db'}"
        names = optuna.get_all_study_names(storage)
        counted = {m: optuna.load_study(study_name=m, storage=storage) for m in methods if m in names}
        return {
            m: len([t for t in counted[m].trials if t.state.name == "COMPLETE"]) if m in counted else 0 for m in methods
        }

    straight = tmp_path / "straight"
    assert main(tune_args(straight, preset)) == 0
    runs_per_trial = 2  # the tuning seeds 101 and 102
    assert ran == [m for _ in range(4) for m in methods for _ in range(runs_per_trial)]  # one trial each, in turn

    # Runs 1-2 are promptfl's first trial, 3-4 clip_adapter's, 5-6 fedpgp's, 7-8 promptfl's second, ...
    for stop, expected in ((3, (1, 0, 0)), (6, (1, 1, 0)), (9, (2, 1, 1)), (11, (2, 2, 1))):
        folder = tmp_path / f"stopped_at_{stop}"
        ran.clear()
        stop_at[0] = stop
        assert main(tune_args(folder, preset)) == 130
        budgets = finished(folder)
        assert tuple(budgets.values()) == expected  # every trial before the interrupted one: one apart at most
        ran.clear()
        stop_at[0] = None
        assert main(tune_args(folder, preset)) == 0
        behind = [m for m in methods if budgets[m] == min(budgets.values())]
        first_trials = ran[::runs_per_trial][: len(behind)]
        assert first_trials == behind, (stop, budgets, ran)  # the methods behind run first, in table order
        assert finished(folder) == {m: 4 for m in methods}


@pytest.mark.slow
def test_killed_tuning_process_resumes(tmp_path, fake_data_root):
    """The same with a real SIGKILL of the `fedbench tune` process."""
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",), rounds=2)
    command = [sys.executable, "-m", "benchmark.cli", *tune_args(tmp_path, preset)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    csv = tmp_path / "results" / "tuning.csv"
    deadline = time.time() + 300
    while time.time() < deadline and not (csv.is_file() and len(pd.read_csv(csv)) >= 1):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = pd.read_csv(csv)
    assert 1 <= len(before) < 4, "the tuning run must be killed mid-way for this test to mean anything"
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    after = pd.read_csv(csv)
    complete = after[after.state == "COMPLETE"]
    assert len(complete) == 4
    finished_before = before[before.state == "COMPLETE"]
    merged = finished_before.merge(complete, on="trial", suffixes=("_before", "_after"))
    assert len(merged) == len(finished_before)
    assert (merged.param_lr_before == merged.param_lr_after).all() and (merged.value_before == merged.value_after).all()


def test_a_second_tune_process_on_the_same_table_is_refused(tmp_path, fake_data_root, fedbench):
    from benchmark.files import file_lock

    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))
    (tmp_path / "results").mkdir()
    with file_lock(tmp_path / "results" / ".tuning-promptfl.lock"):
        done = fedbench(*tune_args(tmp_path, preset))
    assert done.returncode == 2 and "another `fedbench tune` is tuning promptfl" in done.stderr


def test_methods_tuned_by_separate_processes_share_the_outputs(tmp_path, fake_data_root, fedbench, monkeypatch):
    from methods.clip_adapter import CLIPAdapter
    from methods.promptfl import PromptFL

    for method in (PromptFL, CLIPAdapter):  # one point each: a search of one trial
        monkeypatch.setattr(method, "tunable", {"lr": Choice((0.002,))})
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl", "clip_adapter"))
    assert fedbench(*tune_args(tmp_path, preset, "--methods", "promptfl")).returncode == 0
    chosen = yaml.safe_load((tmp_path / "results" / "tuned.yaml").read_text())
    assert list(chosen["values"]) == ["promptfl"] and chosen["unfinished"] == ["clip_adapter"]
    assert fedbench(*tune_args(tmp_path, preset, "--methods", "clip_adapter")).returncode == 0
    assert sorted(trials(tmp_path / "results")["method"]) == ["clip_adapter", "promptfl"]
    done = fedbench(*tune_args(tmp_path, preset))  # everything is done: only collects
    assert done.returncode == 0 and " trial 1/" not in done.stdout  # no trial ran
    chosen = yaml.safe_load((tmp_path / "results" / "tuned.yaml").read_text())
    assert sorted(chosen["values"]) == ["clip_adapter", "promptfl"] and "unfinished" not in chosen
    assert (
        chosen["command"]
        == f"fedbench tune {preset} --points-per-decade 1 --refinements 0 --extensions 0 --seeds 101 102"
    )


# -- selection over seeds -----------------------------------------------------------------------
# Validation HM by (lr, seed): 0.2 is on the edge of stability -- the best single run (seed 1)
# but collapses at seed 2 -- while the paper's 0.002 is good at both.
EDGE_HM = {(0.002, 101): 70.0, (0.002, 102): 68.0, (0.2, 101): 80.0, (0.2, 102): 20.0}


def test_tuning_selects_the_best_mean_over_seeds_not_the_best_single_run(tmp_path, fake_data_root, monkeypatch):
    from types import SimpleNamespace

    import benchmark.runs.runner as runner
    from benchmark.cli import main
    from methods.promptfl import PromptFL

    monkeypatch.setattr(PromptFL, "tunable", {"lr": Choice((0.002, 0.2))})
    ran = []

    def known_scores(config, *args, **kwargs):  # a run whose validation HM is known, nothing trained
        ran.append((config.method_args["lr"], config.seed, config.eval_split))
        hm = EDGE_HM[(config.method_args["lr"], config.seed)]
        return SimpleNamespace(
            summary={"eval_split": "val", "metrics": {"Local": hm, "Base": hm, "Novel": hm, "HM": hm}}
        )

    monkeypatch.setattr(runner, "run_experiment", known_scores)
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))  # lists seed 1 only
    assert main(tune_args(tmp_path, preset)) == 0
    assert {seed for _, seed, _ in ran} == {101, 102} and {split for *_, split in ran} == {"val"}
    frame = trials(tmp_path / "results")
    assert set(frame["param_lr"]) == {0.002, 0.2}, "both values must be tried for the test to mean anything"
    edge = frame[frame.param_lr == 0.2].iloc[0]
    assert (edge.value_seed101, edge.value_seed102, edge.value) == (80.0, 20.0, 50.0)
    assert frame["value_seed101"].max() == 80.0  # a single-seed search (seed 101) would have chosen 0.2
    (chosen,) = frame[frame.chosen].itertuples()
    assert chosen.param_lr == 0.002 and chosen.value == 69.0
    tuned = yaml.safe_load((tmp_path / "results" / "tuned.yaml").read_text())
    assert tuned["values"]["promptfl"]["lr"] == 0.002 and tuned["validation"]["promptfl"]["tuned"] == 69.0


def known_curve(monkeypatch, hm_of_lr):
    """Every run scores HM = hm_of_lr(lr) on validation, nothing trained; returns the lrs run."""
    from types import SimpleNamespace

    import benchmark.runs.runner as runner

    ran = []

    def scores(config, *args, **kwargs):
        ran.append(config.method_args["lr"])
        hm = hm_of_lr(config.method_args["lr"])
        return SimpleNamespace(
            summary={"eval_split": "val", "metrics": {"Local": hm, "Base": hm, "Novel": hm, "HM": hm}}
        )

    monkeypatch.setattr(runner, "run_experiment", scores)
    return ran


@pytest.mark.parametrize(
    "peak, extensions, flagged",
    [
        (0.6, [0.6, 6.0], False),  # the best rate a decade past the top: found, and 6.0 scores below it
        (60.0, [0.6, 6.0], True),  # still rising when the extensions are spent: flagged with the values tried
        (0.01, [], False),  # the best rate inside the range: no extension runs
    ],
)
def test_a_choice_at_an_end_of_its_range_gets_trials_past_it(
    tmp_path, fake_data_root, monkeypatch, peak, extensions, flagged, no_curves_figure
):
    from benchmark.cli import main

    known_curve(monkeypatch, lambda lr: 70.0 - 5 * math.log10(lr / peak) ** 2)
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))  # lr range [0.0002, 0.06]
    assert main(tune_args(tmp_path, preset, "--extensions", "2")) == 0
    frame = trials(tmp_path / "results")
    assert list(frame["phase"]) == ["grid"] * 4 + ["extension"] * len(extensions)
    assert list(frame[frame.phase == "extension"]["param_lr"]) == pytest.approx(extensions)  # a decade a step
    tuned = yaml.safe_load((tmp_path / "results" / "tuned.yaml").read_text())
    assert tuned["selection"]["extensions"] == 2 and "--extensions 2" in tuned["command"]
    assert "then up to 2 steps of 1/1 decade past an end of the range" in tuned["selection"]["budget"]
    chosen = tuned["values"]["promptfl"]["lr"]
    assert chosen == pytest.approx({0.6: 0.6, 60.0: 6.0, 0.01: 0.011}[peak], rel=0.05)
    flag = tuned.get("flags", {}).get("promptfl", "")
    assert ("lr=6 is the top of the values tried, [0.0002, 6] (declared range [0.0002, 0.06])" in flag) == flagged
    assert "the top of its range" not in flag


def test_the_tuning_seeds_come_from_the_preset_or_the_command(tmp_path, fake_data_root):
    from benchmark.config import ConfigError
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning_plan import plan_tuning, tuning_seeds

    (tmp_path / "one").mkdir(), (tmp_path / "three").mkdir()
    one = load_preset(str(write_preset(tmp_path / "one", fake_data_root, seeds=(5,))))
    three = load_preset(str(write_preset(tmp_path / "three", fake_data_root, seeds=(3, 4, 5))))
    assert tuning_seeds(one) == [101, 102, 103, 104] and tuning_seeds(three) == [101, 102, 103, 104]
    assert tuning_seeds(load_preset("toy")) == [101, 102, 103, 104]
    plan = plan_tuning(three, tmp_path / "r", {"out": str(tmp_path / "runs")}, ["promptfl"], seeds=[7, 8, 9])
    assert plan.seeds == [7, 8, 9] and sorted({c.config.seed for c in plan.cells(plan.variants[0], {})}) == [7, 8, 9]
    assert plan.identity(plan.variants[0])["seeds"] == [7, 8, 9]  # a study is resumed only under the same seeds
    with pytest.raises(ConfigError, match="at least 2 run seeds"):
        plan_tuning(three, tmp_path / "r", {}, ["promptfl"], seeds=[4, 4])


def test_tuning_refuses_seeds_the_table_reports(tmp_path, fake_data_root):
    """Selection and report never share draws: a tuning seed that is also a table seed is refused."""
    from benchmark.config import ConfigError
    from benchmark.sweeps.presets import load_preset
    from benchmark.sweeps.tuning_plan import plan_tuning, tuning_seeds

    three = load_preset(str(write_preset(tmp_path, fake_data_root, seeds=(3, 4, 101))))
    assert tuning_seeds(three) == [102, 103, 104, 105]
    with pytest.raises(ConfigError, match=r"shares seed\(s\) \[4\] with table"):
        plan_tuning(three, tmp_path / "r", {}, ["promptfl"], seeds=[4, 7])


# -- validation splits --------------------------------------------------------------------------
def test_holdout_is_deterministic_per_class_and_disjoint(fake_data_root, tiny_backbone):
    from benchmark.config import build_config
    from benchmark.runs.preparation import load_run_dataset
    from data.validation import HOLDOUT_FRACTION, holdout_indices, validation_view

    config = build_config({"dataset": "dtd", "data_root": str(fake_data_root), "backbone": TINY, "pretrained": "none"})
    dataset = load_run_dataset(config, tiny_backbone)
    assert dataset.val is None  # the fake layout's "val" list is empty
    view, record = validation_view(dataset)
    held = record["holdout_train_indices"]
    assert held == holdout_indices(dataset.train.labels)
    per_class = pd.Series([dataset.train.labels[i] for i in held]).value_counts()
    assert set(per_class) == {round(HOLDOUT_FRACTION * 6)} and len(per_class) == len(dataset.class_names)
    kept = view.train.indices
    assert not set(kept) & set(held) and len(kept) + len(held) == len(dataset.train)
    assert view.test.labels == [dataset.train.labels[i] for i in held]
    # validation images are read under the test transform, training images under the train one
    assert view.test.source.transform is dataset.test.transform and view.train.source is dataset.train
    assert view.test.cache_key != view.train.cache_key != dataset.train.cache_key


def test_the_split_files_own_val_split_is_used(tmp_path, tiny_backbone):
    from benchmark.config import build_config
    from benchmark.runs.preparation import load_run_dataset
    from data.validation import validation_view

    root = write_split_zhou(tmp_path, num_classes=4, train_per_class=3, test_per_class=2)
    split_file = root / "dtd" / "split_zhou_DescribableTextures.json"
    entries = json.loads(split_file.read_text())
    entries["val"] = entries["test"][:4]  # images that exist; listed as validation
    split_file.write_text(json.dumps(entries))
    config = build_config({"dataset": "dtd", "data_root": str(root), "backbone": TINY, "pretrained": "none"})
    dataset = load_run_dataset(config, tiny_backbone)
    assert dataset.val is not None and len(dataset.val) == 4 and dataset.val.name == "dtd/val"
    view, record = validation_view(dataset)
    assert view.test is dataset.val and view.train is dataset.train
    assert record["source"].startswith("the dataset's own validation split")


@pytest.mark.parametrize("name", FAKE_NAMES)
def test_every_layout_gives_validation_data_apart_from_test(tmp_path, name):
    from data.base import DatasetError
    from data.catalog import load_dataset
    from data.transforms import clip_transforms
    from data.validation import validation_view

    make_fake_dataset(name, tmp_path)
    dataset = load_dataset(name, tmp_path, clip_transforms(32, augment=False))
    if len(dataset.train) == 0:  # the test-only ImageNet variants
        with pytest.raises(DatasetError, match="tuning needs validation data"):
            validation_view(dataset)
        return
    view, record = validation_view(dataset)
    assert view.test is not dataset.test and view.class_names == dataset.class_names
    if name in COOP_FILES or name in DOMAINBED or name == "fgvc_aircraft":  # layouts with a validation split
        assert record["source"].startswith("the dataset's own validation split") and view.test is dataset.val
        assert not set(dataset.val.paths) & set(dataset.test.paths)
    else:
        assert record["source"].startswith("held-out part of train")
        assert view.test.source.name == dataset.train.name and view.test.indices == record["holdout_train_indices"]
        assert not set(view.test.indices) & set(view.train.indices)


def test_toy_world_has_a_generated_val_split(toy_splits):
    val, test = toy_splits.val, toy_splits.test
    assert val is not None and val.labels == test.labels  # same size and class layout ...
    assert not (val.images == test.images).all()  # ... but other images
    assert val.cache_key != test.cache_key


# -- the method contract ------------------------------------------------------------------------
def test_every_trained_builtin_declares_its_lr_around_the_paper_default():
    from benchmark.method import LogUniform
    from benchmark.registry import available_methods, hyperparameters

    for name, cls in available_methods().items():
        if name.startswith("test_") or cls.__module__.split(".")[0] != "methods":
            continue
        defaults = {h.name: h.default for h in hyperparameters(cls)}
        if "lr" not in defaults:
            assert not cls.tunable, name
            continue
        space = cls.tunable["lr"]
        assert isinstance(space, LogUniform) and space.low < defaults["lr"] < space.high, name


@pytest.mark.parametrize(
    "tunable, message",
    [
        ({"learning_rate": LogUniform(1e-4, 1e-1)}, "not one of its hyperparameters"),
        ({"lr": LogUniform(0.1, 1.0)}, "lies outside its search range"),
        ({"lr": LogUniform(0.0, 1.0)}, "needs 0 < low < high"),
        ({"lr": Uniform(0.5, 0.1)}, "needs low < high"),
        ({"lr": Choice((0.1, 0.2))}, "lies outside its search range"),
        ({"lr": (1e-4, 1e-1)}, "must be LogUniform, Uniform or Choice"),
    ],
)
def test_bad_tunable_declarations_are_refused_at_registration(tunable, message):
    from benchmark.method import FederatedMethod
    from benchmark.registry import MethodError, check_method_class

    class Broken(FederatedMethod):
        def __init__(self, backbone, lr: float = 0.01) -> None:
            super().__init__(backbone)

    Broken.tunable = tunable
    with pytest.raises(MethodError, match=message):
        check_method_class(Broken, "broken")


@pytest.mark.parametrize(
    "ranges, tunable, message",
    [
        ({"learning_rate": Range(gt=0)}, {}, "ranges names 'learning_rate', which is not one of its hyperparameters"),
        ({"lr": Range(gt=0.1)}, {}, r"the default lr=0.01 lies outside its range \(> 0.1\)"),
        ({"lr": Range(gt=0, ge=0)}, {}, "takes one lower bound"),
        ({"lr": Range(ge=1, le=0.5)}, {}, "lower bound below its upper bound"),
        ({"lr": Range()}, {}, "needs a bound"),
        ({"lr": (0, 1)}, {}, "must be a benchmark.method.Range"),
        ({"name": Range(ge=1)}, {}, "must be a benchmark.method.Range over a number"),
        ({"lr": Range(gt=0, lt=0.05)}, {"lr": LogUniform(0.001, 0.1)}, r"reaches outside the values lr may take"),
    ],
)
def test_bad_ranges_are_refused_at_registration(ranges, tunable, message):
    from benchmark.method import FederatedMethod
    from benchmark.registry import MethodError, check_method_class

    class Broken(FederatedMethod):
        def __init__(self, backbone, lr: float = 0.01, name: str = "x") -> None:
            super().__init__(backbone)

    Broken.ranges, Broken.tunable = ranges, tunable
    with pytest.raises(MethodError, match=message):
        check_method_class(Broken, "broken")


def test_every_built_in_method_bounds_what_it_tunes():
    from benchmark.registry import available_methods

    for name, cls in available_methods().items():
        if cls.__module__.startswith("methods."):
            assert set(cls.tunable) <= set(cls.ranges), name


def _open_storage(results_dir, barrier):
    from types import SimpleNamespace

    from benchmark.sweeps.tuning_studies import storage

    barrier.wait()
    storage(SimpleNamespace(results_dir=results_dir))


def test_two_tuning_processes_create_a_new_study_file_together(tmp_path):
    """Two `fedbench tune` processes splitting --methods start on a fresh results folder at
    once: both open tuning.db (its schema is created once, under a lock) and neither fails."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    for attempt in range(3):
        results = tmp_path / f"results{attempt}"
        barrier = context.Barrier(2)
        workers = [context.Process(target=_open_storage, args=(results, barrier)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert [w.exitcode for w in workers] == [0, 0]
        assert (results / "tuning.db").is_file()


def test_tune_without_data_exits_2_and_writes_nothing(tmp_path, fedbench):
    """Checked as `fedbench reproduce` checks it, before any trial: no tuning.db, tuned.yaml
    or lock file is left for a search that could not run one."""
    preset = write_preset(tmp_path, tmp_path / "nodata", methods=("promptfl",))
    done = fedbench(*tune_args(tmp_path, preset))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("fedbench tune: error: cannot tune mini: its trials need data that is not here")
    assert str(tmp_path / "nodata" / "dtd") in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs").exists()


def test_tune_exits_non_zero_when_every_trial_of_a_method_failed(tmp_path, fake_data_root, monkeypatch, fedbench):
    import benchmark.runs.runner as runner

    def diverges(config, *args, **kwargs):  # every run of every trial fails as a diverging one does
        raise FloatingPointError(f"loss is nan at lr {config.method_args['lr']}")

    monkeypatch.setattr(runner, "run_experiment", diverges)
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",))
    done = fedbench(*tune_args(tmp_path, preset))
    assert done.returncode == 1
    assert done.stdout.count("-> FAILED: FloatingPointError: loss is nan") == 4  # every point of the grid
    assert "fedbench tune: every trial of promptfl failed (see FAILED above): nothing was chosen for it" in done.stderr
    assert yaml.safe_load((tmp_path / "results" / "tuned.yaml").read_text())["values"] == {}
