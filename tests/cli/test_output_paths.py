"""Every file a command writes where the user says: its folder made, or exit 2 with a message
naming the flag, the path and the fix; the format checked before any work (issue 50, item 3)."""

from __future__ import annotations

import pytest

PATHOLOGICAL = ("partition", "toy", "--protocol", "pathological", "--classes-per-client", 3, "--clients", 6)


def test_a_plot_and_a_csv_in_folders_that_do_not_exist_yet_are_written(fedbench, tmp_path):
    done = fedbench(*PATHOLOGICAL, "--plot", tmp_path / "nodir" / "sub" / "p.png")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "nodir" / "sub" / "p.png").stat().st_size > 0
    done = fedbench(
        "partition", "toy", "--protocol", "dirichlet", "--clients", 6, "--csv", tmp_path / "nodir" / "d.csv"
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "nodir" / "d.csv").read_text().startswith("client,")


@pytest.mark.parametrize(
    "flag, name, expected",
    [
        ("--plot", "p.txt", "--plot {out}/p.txt: '.txt' is not a format it writes; end the file name with one of .png"),
        ("--plot", "p", "--plot {out}/p: the name has no extension"),
        ("--csv", "d.png", "--csv {out}/d.png: '.png' is not a format it writes; end the file name with one of .csv"),
        ("--plot", "afile/p.png", "--plot {out}/afile/p.png: {out}/afile is a file, not a folder"),
        ("--csv", "afile", "--csv {out}/afile: the name has no extension"),
        # an existing folder is said to be one (it was "the name has no extension")
        ("--plot", "adir", "--plot {out}/adir is a folder; pass a file name, e.g. {out}/adir/out.png"),
        ("--csv", "adir", "--csv {out}/adir is a folder; pass a file name, e.g. {out}/adir/out.csv"),
        ("--plot", "adir.png", "--plot {out}/adir.png is a folder; pass a file name"),
    ],
)
def test_a_wrong_output_path_is_exit_2_before_any_work(fedbench, tmp_path, flag, name, expected):
    (tmp_path / "afile").write_text("in the way\n")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.png").mkdir()
    done = fedbench(*PATHOLOGICAL, flag, tmp_path / name)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"fedbench partition: error: {expected.format(out=tmp_path)}" in done.stderr
    assert "client  images" not in done.stdout  # refused before the partition was made
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["adir", "adir.png", "afile"]


def test_the_other_output_flags_are_checked(fedbench, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("in the way\n")
    (tmp_path / "runs" / "a_run").mkdir(parents=True)
    (tmp_path / "runs" / "a_run" / "summary.json").write_text("{}")  # a run folder by its name, not yet read
    done = fedbench("runs", tmp_path / "runs", "--plot", blocker / "compare")
    assert done.returncode == 2 and f"--plot {blocker / 'compare'}: {blocker} is a file" in done.stderr
    done = fedbench("new-method", "my_method", "--out", blocker)
    assert done.returncode == 2 and f"--out {blocker}: {blocker} is a file, not a folder" in done.stderr
    done = fedbench("bench", "--quick", "--out", blocker / "perf.md")
    assert done.returncode == 2 and f"--out {blocker / 'perf.md'}: {blocker} is a file" in done.stderr
    done = fedbench("wandb-dashboard", "toy", "--spec", blocker / "spec.json")
    assert done.returncode == 2 and f"--spec {blocker / 'spec.json'}: {blocker} is a file" in done.stderr
    assert blocker.read_text() == "in the way\n"


def test_an_output_folder_where_nothing_can_be_made_is_exit_2(fedbench, tmp_path):
    """Issue 60's walk: `partition toy --plot /proc/x.png` and `runs DIR --plot /proc/x` passed
    the check (os.access: root may write by permissions) and ended in a traceback, exit 1."""
    from pathlib import Path

    if not Path("/proc/self/mounts").is_file():
        pytest.skip("needs Linux's /proc")
    done = fedbench(*PATHOLOGICAL, "--plot", "/proc/fedbench-plot.png")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "fedbench partition: error: --plot /proc/fedbench-plot.png: /proc is not writable" in done.stderr
    assert "it lies on a 'proc' file system" in done.stderr and "client  images" not in done.stdout
    (tmp_path / "runs" / "a_run").mkdir(parents=True)
    (tmp_path / "runs" / "a_run" / "summary.json").write_text("{}")
    done = fedbench("runs", tmp_path / "runs", "--plot", "/proc/fedbench-compare")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--plot /proc/fedbench-compare: /proc is not writable (the closest folder" in done.stderr


@pytest.mark.parametrize("command", ["reproduce", "tune"])
@pytest.mark.parametrize("where", ["proc", "file"])
def test_an_unwritable_results_folder_is_exit_2_before_any_cell_runs(
    fedbench, fake_data_root, tmp_path, command, where
):
    # It was found once every cell had run (62 s on the toy table), as an OSError traceback.
    from pathlib import Path

    from conftest import write_mini_preset

    if where == "proc" and not Path("/proc/self/mounts").is_file():
        pytest.skip("needs Linux's /proc")
    (tmp_path / "afile").write_text("in the way\n")
    results = Path("/proc/fedbench-results") if where == "proc" else tmp_path / "afile" / "results"
    preset = write_mini_preset(tmp_path, fake_data_root, methods=("zeroshot", "promptfl"))
    extra = (
        ("--seeds", 101, 102, "--points-per-decade", 1, "--refinements", 0, "--extensions", 0)
        if command == "tune"
        else ()
    )
    done = fedbench(command, preset, "--out", tmp_path / "runs", "--results", results, *extra)
    assert done.returncode == 2, done.stderr
    why = (
        "cannot be created: nothing can be written in /proc"
        if where == "proc"
        else f"lies under the file {tmp_path / 'afile'}"
    )
    assert f"output folder {results} {why}" in done.stderr
    assert "--results" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # no cell ran
