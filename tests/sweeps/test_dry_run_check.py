"""`fedbench reproduce --dry-run` groups what is missing per dataset ("21 cells need sun397") and
lists cells only with --cells; `--check` exits 3 when a cell to run cannot start (issue 50, item 8)."""

from __future__ import annotations


def test_the_dry_run_groups_missing_data_and_check_exits_3(fedbench, tmp_path):
    args = ("reproduce", "base2novel", "--data-root", tmp_path / "nodata", "--out", tmp_path / "runs")
    (tmp_path / "nodata").mkdir()
    dry = fedbench(*args, "--dry-run")
    assert dry.returncode == 0  # a plan, whatever it finds
    assert "168 of the 168 cells to run cannot start:" in dry.stdout
    assert "  24 cells need sun397" in dry.stdout  # 8 methods x 3 seeds
    assert " | sun397 | " not in dry.stdout and "(--cells lists every cell and its status)" in dry.stdout
    check = fedbench(*args, "--check")
    assert check.returncode == 3 and "168 of the 168 cells to run cannot start" in check.stderr
    cells = fedbench(*args, "--dry-run", "--cells")
    assert cells.returncode == 0 and sum(" | sun397 | " in line for line in cells.stdout.splitlines()) == 24
    assert not (tmp_path / "runs").exists()  # a plan writes no run folder


def test_check_exits_0_when_every_cell_can_start(fedbench, tmp_path):
    done = fedbench("reproduce", "toy", "--check", "--out", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "cannot start" not in done.stdout
