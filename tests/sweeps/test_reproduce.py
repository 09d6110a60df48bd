"""`fedbench reproduce`: expansion, resume, tables beside the paper, W&B offline, notebook."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import write_mini_preset

from benchmark.cli import main

# The packaged copy is the source of truth: a clone has nothing beside the repository.
REFERENCE = Path(__file__).resolve().parents[2] / "benchmark" / "reference" / "paper_tables.csv"


def write_preset(folder: Path, data_root: Path, methods=("zeroshot", "promptfl"), seeds=(1, 2), rounds=1) -> Path:
    return write_mini_preset(folder, data_root, methods, seeds, rounds, paper_table="base2novel")


def reproduce(tmp_path: Path, preset: Path, *extra: str) -> int:
    return main(
        ["reproduce", str(preset), "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), *extra]
    )


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory, fake_data_root):
    tmp = tmp_path_factory.mktemp("reproduce")
    preset = write_preset(tmp, fake_data_root)
    assert reproduce(tmp, preset) == 0
    return tmp, preset


def test_reproduce_writes_tables_and_figures(reproduced):
    tmp, _ = reproduced
    results = tmp / "results"
    for name in ("table.md", "table.csv", "table.tex", "radar.png", "curves.png"):
        assert (results / name).is_file(), name
    # 12 of DTD's 47 classes, one of the paper's 7 datasets: the table says so and compares nothing.
    assert not (results / "paper_comparison.csv").exists()
    assert len(list((tmp / "runs").glob("*_seed*"))) == 4  # 2 methods x 2 seeds
    assert "| promptfl |" in (results / "table.md").read_text()


def test_second_reproduce_trains_nothing(reproduced, capsys):
    tmp, preset = reproduced
    before = {p.name: (p / "summary.json").stat().st_mtime_ns for p in (tmp / "runs").glob("*_seed*")}
    capsys.readouterr()
    assert reproduce(tmp, preset) == 0
    out = capsys.readouterr().out
    assert "ran 0 runs, 4 were already done" in out
    after = {p.name: (p / "summary.json").stat().st_mtime_ns for p in (tmp / "runs").glob("*_seed*")}
    assert before == after


def test_average_hm_is_the_mean_of_per_run_hms(reproduced):
    tmp, _ = reproduced
    stats = pd.read_csv(tmp / "results" / "table.csv", keep_default_na=False)
    for method in ("zeroshot", "promptfl"):
        hms = [
            json.loads((run / "summary.json").read_text())["metrics"]["HM"]
            for run in (tmp / "runs").glob(f"{method}_*")
        ]
        average = stats[(stats.label == method) & (stats.dataset == "Average") & (stats.metric == "HM")]["mean"]
        assert average.item() == pytest.approx(sum(hms) / len(hms))


def test_paper_numbers_sit_in_the_right_cells(reproduced):
    tmp, _ = reproduced
    reference = pd.read_csv(REFERENCE)
    # Anchors typed from the pFedMMA paper's base-to-novel table (7-dataset average), so a
    # damaged packaged file cannot pass by agreeing with itself.
    anchors = {
        ("CLIP", "Local"): 76.36,
        ("CLIP", "Novel"): 81.21,
        ("PromptFL", "Local"): 88.93,
        ("PromptFL", "HM"): 83.09,
    }
    for (paper_name, metric), value in anchors.items():
        rows = reference[
            (reference.table == "base2novel") & (reference.method == paper_name) & (reference.metric == metric)
        ]
        assert rows["value"].tolist() == [value]
    # The fake cells are not the paper's (the rendered table compares nothing, tests/sweeps/test_scope.py):
    # the comparison's mechanics, on the table's numbers.
    from benchmark.sweeps.paper import reference_numbers
    from benchmark.sweeps.table_comparisons import paper_comparison

    stats = pd.read_csv(tmp / "results" / "table.csv", keep_default_na=False)
    comparison = paper_comparison(stats, reference_numbers("base2novel"), ["zeroshot", "promptfl"])
    for paper_name, ours in (("CLIP", "zeroshot"), ("PromptFL", "promptfl")):
        for metric in ("Local", "Novel", "HM"):
            expected = reference[
                (reference.table == "base2novel") & (reference.method == paper_name) & (reference.metric == metric)
            ]
            row = comparison[(comparison.method == ours) & (comparison.metric == metric)]
            assert row["paper"].item() == expected["value"].item()
            assert row["delta"].item() == pytest.approx(row["ours"].item() - row["paper"].item())
    assert set(comparison.method) == {"zeroshot", "promptfl"}


def test_notebook_executes_on_the_results(reproduced):
    import nbformat
    from nbclient import NotebookClient

    tmp, _ = reproduced
    notebook = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "results.ipynb", as_version=4)
    # FEDBENCH_RUNS: list the fixture's runs instead of making two toy runs (keeps this test fast);
    # the kernel starts in tmp, outside the checkout, so the notebook must find it via FEDBENCH_ROOT.
    env = {
        "FEDBENCH_RESULTS": str(tmp / "results"),
        "FEDBENCH_RUNS": str(tmp / "runs"),
        "FEDBENCH_ROOT": str(Path(__file__).resolve().parents[2]),
    }
    os.environ.update(env)
    try:
        client = NotebookClient(
            notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp)}}
        )
        client.execute()
    finally:
        for key in env:
            del os.environ[key]
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("promptfl" in json.dumps(o.get("data", {})) for o in outputs)
    # the single-runs listing: one row per run folder of the fixture (2 methods x 2 seeds)
    listing = notebook.cells[-1].outputs[-1]["data"]["text/plain"]
    for run in (tmp / "runs").glob("*_seed*"):
        assert run.name in listing
    assert "4 runs: 4 finished" in json.dumps([o.get("text", "") for o in notebook.cells[-1].outputs])


def test_a_filtered_reproduce_keeps_every_other_row(reproduced, capsys):
    tmp, preset = reproduced
    before = pd.read_csv(tmp / "results" / "table.csv", keep_default_na=False)
    capsys.readouterr()
    # Reruns one zeroshot cell only; the table is still rendered from every cell on disk.
    assert reproduce(tmp, preset, "--methods", "zeroshot", "--seeds", "1", "--force") == 0
    assert "ran 1 runs" in capsys.readouterr().out
    after = pd.read_csv(tmp / "results" / "table.csv", keep_default_na=False)
    assert set(after.label) == {"zeroshot", "promptfl"}
    pd.testing.assert_frame_equal(before, after)  # same rows, same numbers (a rerun is deterministic)


def test_a_reproduce_that_ran_nothing_exits_non_zero_with_the_reason(tmp_path, capsys):
    preset = write_preset(tmp_path, tmp_path / "nodata", methods=("zeroshot",), seeds=(1,))
    assert reproduce(tmp_path, preset, "--datasets", "dtd") == 1
    captured = capsys.readouterr()
    assert "ran 0 runs" in captured.out
    assert (
        "nothing it was asked to run ran: 1 of the 1 cells to run were skipped because their data is missing"
        in captured.err
    )
    assert str(tmp_path / "nodata" / "dtd") in captured.err


def test_dry_run_of_the_paper_table_lists_168_cells_and_missing_data(tmp_path, capsys):
    assert (
        main(["reproduce", "base2novel", "--dry-run", "--data-root", str(tmp_path / "nodata"), "--out", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    assert "168 cells: 0 done, 168 to run" in out
    for dataset in ("caltech101", "oxford_pets", "oxford_flowers", "food101", "dtd", "sun397", "ucf101"):
        assert f"missing dataset {dataset}: expected {tmp_path / 'nodata'}" in out
    assert "split_zhou" in out and "fedbench data download" in out


def test_wandb_offline_runs_hold_the_results(tmp_path, fake_data_root):
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",), seeds=(1,))
    assert reproduce(tmp_path, preset, "--wandb", "offline") == 0
    (run_dir,) = (tmp_path / "runs").glob("promptfl_*")
    metrics = pd.read_csv(run_dir / "metrics.csv")
    final = metrics[(metrics.client >= 0) & (metrics.metric.isin(["Local", "Base", "Novel"]))]
    tables = list((tmp_path / "runs" / "wandb").glob("offline-run-*/files/media/table/per_client_*.table.json"))
    assert len(tables) == 1
    logged = json.loads(tables[0].read_text())
    columns = logged["columns"]
    for row in logged["data"]:
        client = dict(zip(columns, row))
        for metric in ("Local", "Base", "Novel"):
            expected = final[(final.client == client["client"]) & (final.metric == metric)]["value"].item()
            assert client[metric] == pytest.approx(expected)
    summary_tables = list((tmp_path / "runs" / "wandb").glob("offline-run-*/files/media/table/table_*.table.json"))
    assert len(summary_tables) == 1  # the rendered table, logged once per reproduction


@pytest.mark.slow
def test_killed_sweep_resumes_only_missing_cells(tmp_path, fake_data_root):
    preset = write_preset(tmp_path, fake_data_root, methods=("promptfl",), seeds=(1, 2, 3, 4), rounds=3)
    command = [
        sys.executable,
        "-m",
        "benchmark.cli",
        "reproduce",
        str(preset),
        "--out",
        str(tmp_path / "runs"),
        "--results",
        str(tmp_path / "results"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    runs = tmp_path / "runs"
    deadline = time.time() + 240
    while time.time() < deadline and len([p for p in runs.glob("promptfl_*") if (p / "summary.json").exists()]) < 1:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    finished = {p.name: (p / "summary.json").stat().st_mtime_ns for p in runs.glob("promptfl_*")}
    assert 1 <= len(finished) < 4, "the sweep must be killed mid-way for this test to mean anything"
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"ran {4 - len(finished)} runs, {len(finished)} were already done" in done.stdout
    after = {p.name: (p / "summary.json").stat().st_mtime_ns for p in runs.glob("promptfl_*")}
    assert len(after) == 4 and all(after[name] == mtime for name, mtime in finished.items())
    assert not list(runs.glob(".*partial"))


def test_wandb_dashboard_spec_has_the_panels(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_PROJECT", raising=False)
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc: not logged in, nothing is sent
    spec_path = tmp_path / "dash.json"
    # No report was made: not a success, and the reason says what to do.
    assert main(["wandb-dashboard", "base2novel", "--spec", str(spec_path)]) == 1
    spec = json.loads(spec_path.read_text())
    titles = [p["title"] for p in spec["panels"]]
    assert titles[0] == "HM by method" and spec["panels"][0]["group_by"] == ["job_type"]
    assert "Local / Base / Novel / HM on dtd" in titles and "train loss per round" in titles
    assert all(p["filters"]["group"] == "base2novel" for p in spec["panels"]) and spec["project"] == "fedbench"
    err = capsys.readouterr().err
    assert "no report was made: not logged in to W&B: run `wandb login`" in err


def test_a_failed_wandb_dashboard_writes_nothing_unless_spec_asks(tmp_path, capsys, monkeypatch):
    """Issue 38: a failed call wrote results/TABLE/dashboard.json into the checkout."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # not logged in
    monkeypatch.chdir(tmp_path)
    assert main(["wandb-dashboard", "base2novel"]) == 1
    assert not (tmp_path / "results").exists()
    assert "(--spec FILE writes the specification without a report)" in capsys.readouterr().err


def test_wandb_dashboard_without_wandb_workspaces_says_how_to_install_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)  # as when the package is not installed
    monkeypatch.setenv("WANDB_API_KEY", "f" * 40)  # logged in: only the package is missing
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    monkeypatch.setenv("WANDB_RUN_GROUP", "my-group")
    spec_path = tmp_path / "dash.json"
    assert main(["wandb-dashboard", "base2novel", "--spec", str(spec_path)]) == 1
    err = capsys.readouterr().err
    assert "no report was made: wandb-workspaces is not installed: pip install -c constraints.txt -e '.[wandb]'" in err
    spec = json.loads(spec_path.read_text())
    assert spec["project"] == "from-env" and all(p["filters"]["group"] == "my-group" for p in spec["panels"])


def test_a_subset_run_never_writes_over_the_presets_table(tmp_path, fake_data_root, monkeypatch, capsys):
    """`fedbench reproduce TABLE --methods A --seeds 1` (as docs/writing-a-method.md suggests)
    renders its table beside its run folders; results/TABLE, the full table (shipped in
    this repository for the toy world), stays byte for byte as it was."""
    monkeypatch.chdir(tmp_path)
    preset = write_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"), seeds=(1, 2))
    shipped = tmp_path / "results" / "mini"
    shipped.mkdir(parents=True)
    for name in ("table.md", "table.csv", "radar.png"):
        (shipped / name).write_bytes(f"the full table's {name}\n".encode())
    before = {p.name: p.read_bytes() for p in shipped.iterdir()}
    capsys.readouterr()
    assert main(["reproduce", str(preset), "--methods", "zeroshot", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in shipped.iterdir()} == before
    subset = Path("runs") / "mini" / "subset-table"
    assert (tmp_path / subset / "table.md").is_file()
    assert (
        f"a subset of mini (--seeds, --methods): its table goes to {subset}, not {Path('results') / 'mini'} "
        f"(the preset's full table); pass --results {Path('results') / 'mini'} to render it there"
    ) in out


def test_every_cell_of_the_preset_and_more_is_not_a_subset(tmp_path, capsys):
    """`fedbench demo` (`reproduce toy --methods <every registered method>`) renders into
    results/toy: its filter leaves no cell of the preset out. A --set run is another table."""
    from benchmark.registry import available_methods

    every = [m for m in available_methods() if not m.startswith("test_")]
    out = tmp_path / "runs"
    assert main(["reproduce", "toy", "--methods", *every, "--dry-run", "--out", str(out)]) == 0
    assert "a subset of" not in capsys.readouterr().out
    assert main(["reproduce", "toy", "--set", "rounds=2", "--dry-run", "--out", str(out)]) == 0
    assert f"a subset of toy (--set): its table goes to {out / 'subset-table'}" in capsys.readouterr().out
