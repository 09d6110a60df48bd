"""`fedbench run` on a finished cell skips it (`--force` reruns), a single run draws its
curves, and `fedbench runs DIR` lists and compares the runs under a folder."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from conftest import tiny_run_args

from benchmark.cli import main


def tiny_run(data_root: Path, out: Path, *extra: str) -> list[str]:
    return tiny_run_args(
        data_root, out, "--local-epochs", "1", "--clients", "2", "--rounds", "2", "--eval-every", "1", *extra
    )


def test_a_finished_cell_is_skipped_and_force_runs_it_again(fake_data_root, tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(tiny_run(fake_data_root, out)) == 0
    (summary,) = out.glob("promptfl_*/summary.json")
    run_dir = summary.parent
    first = summary.stat().st_mtime_ns
    assert (run_dir / "curves.png").is_file()  # a single run draws its accuracy by round
    capsys.readouterr()

    assert main(tiny_run(fake_data_root, out)) == 0
    printed = capsys.readouterr().out
    assert f"skipped: {run_dir} holds this cell's finished run" in printed and "--force" in printed
    hm = json.loads(summary.read_text())["metrics"]["HM"]
    assert f"{hm:7.2f}" in printed  # its table, from the folder
    assert summary.stat().st_mtime_ns == first

    assert main(tiny_run(fake_data_root, out, "--force")) == 0
    printed = capsys.readouterr().out
    assert "skipped" not in printed and f"run folder: {run_dir}" in printed
    assert summary.stat().st_mtime_ns != first


def test_runs_lists_each_run_with_what_differs_and_plots_them(fake_data_root, tmp_path, capsys):
    out = tmp_path / "runs"
    for lr in ("0.002", "0.01"):
        assert main(tiny_run(fake_data_root, out, "--lr", lr)) == 0
    folders = {json.loads((p / "summary.json").read_text())["config_hash"]: p for p in out.glob("promptfl_*")}
    assert len(folders) == 2
    lrs = {}
    for folder in folders.values():
        lrs[folder.name] = "0.002" if "lr: 0.002" in (folder / "config.yaml").read_text() else "0.01"
    # A stopped run (its round checkpoint) and a failed one beside them, as the runner and
    # `reproduce` record them: the run's config with another lr.
    config = yaml.safe_load(next(iter(folders.values())).joinpath("config.yaml").read_text())
    config.pop("identity")
    stopped = {**config, "method_args": {**config["method_args"], "lr": 0.5}}
    (out / ".promptfl_stopped_x.checkpoint.pt").write_bytes(b"")
    sidecar = {"round": 1, "wandb_run_id": None, "config": stopped}
    (out / ".promptfl_stopped_x.checkpoint.json").write_text(json.dumps(sidecar))
    failed = {**config, "method_args": {**config["method_args"], "lr": 9.0}}
    (out / "promptfl_failed_y.failed.json").write_text(json.dumps({"error": "DivergenceError: boom", "config": failed}))
    capsys.readouterr()

    assert main(["runs", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    header = lines[0].split()
    assert header[:3] == ["run", "state", "lr"] and {"Local", "Base", "Novel", "HM"} <= set(header)
    for name, lr in lrs.items():
        (row,) = [line.split() for line in lines if line.split()[0] == name]
        assert row[1:3] == ["finished", lr]
        hm = json.loads((out / name / "summary.json").read_text())["metrics"]["HM"]
        assert float(row[header.index("HM")]) == round(hm, 2)
    (stopped,) = [line for line in lines if line.strip().startswith("promptfl_stopped_x")]
    assert "resumable" in stopped and "0.5" in stopped and "stopped after round 1" in stopped
    (failed,) = [line for line in lines if line.strip().startswith("promptfl_failed_y")]
    assert " failed " in failed and "DivergenceError: boom" in failed
    assert "2 finished, 1 resumable, 1 failed" in printed

    plots = tmp_path / "compare"
    assert main(["runs", str(out), "--plot", str(plots)]) == 0
    for name in ("runs.md", "runs.csv", "table.md", "table.csv", "curves.png", "radar.png"):
        assert (plots / name).is_file(), name
    table = (plots / "table.md").read_text()
    assert "promptfl (lr=0.002)" in table and "promptfl (lr=0.01)" in table
    listing = pd.read_csv(plots / "runs.csv")
    assert sorted(listing["state"]) == ["failed", "finished", "finished", "resumable"]


def test_runs_on_a_folder_without_runs_says_what_it_looked_for(tmp_path, capsys):
    assert main(["runs", str(tmp_path)]) == 2
    assert f"no runs under {tmp_path}" in capsys.readouterr().err
    assert main(["runs", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_runs_filters_and_shows_only_the_settings_that_differ_where_they_apply(fake_data_root, tmp_path, capsys):
    """Issue 38: no filter, and a column per hyperparameter of every method (22 to 70 columns,
    mostly dashes). A hyperparameter is a column when it differs among the runs that have it."""
    out = tmp_path / "runs"
    for lr in ("0.002", "0.01"):
        assert main(tiny_run(fake_data_root, out, "--lr", lr)) == 0
    flags = ["--local-epochs", "1", "--clients", "2", "--rounds", "2", "--eval-every", "1"]  # tiny_run's
    assert main(tiny_run_args(fake_data_root, out, *flags, method="zeroshot")) == 0
    capsys.readouterr()
    assert main(["runs", str(out)]) == 0
    header = capsys.readouterr().out.splitlines()[0].split()
    # method and lr differ (zeroshot has no lr); n_ctx (promptfl's) and template (zeroshot's) are no columns
    assert header == ["run", "state", "method", "lr", "Local", "Base", "Novel", "HM"]
    assert main(["runs", str(out), "--where", "method=promptfl", "lr=0.01"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 3 and rows[1].split()[0].startswith("promptfl_") and rows[-1] == "1 finished"
    assert main(["runs", str(out), "--where", "lrr=0.01"]) == 2
    assert "--where lrr=0.01: no run has a setting 'lrr' (did you mean 'lr'?)" in capsys.readouterr().err
    assert main(["runs", str(out), "--where", "state=failed"]) == 2
    assert "no run under" in capsys.readouterr().err

    # Issue 60, item 9: run folders as arguments (one or several), and a,b as either value.
    assert main(["runs", str(out), "--where", "method=promptfl,zeroshot"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 finished"
    promptfl = sorted(out.glob("promptfl_*"))
    (zeroshot,) = out.glob("zeroshot_*")
    assert main(["runs", str(zeroshot)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].split()[0] == zeroshot.name and rows[-1] == "1 finished"
    assert main(["runs", *map(str, promptfl), str(out)]) == 0  # a run named twice is listed once
    rows = capsys.readouterr().out.splitlines()
    assert [row.split()[0] for row in rows[1:-1]] == [p.name for p in promptfl] + [zeroshot.name]
    assert rows[-1] == "3 finished"


def test_runs_on_an_empty_folder_answers_without_torch(tmp_path):
    """It took 15 s (pandas, torch) to say there were no runs."""
    import subprocess
    import sys

    script = "import sys\nfrom benchmark.cli import main\ncode = main(['runs', sys.argv[1]])\nprint(code, 'torch' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert f"no runs under {tmp_path}" in done.stderr
