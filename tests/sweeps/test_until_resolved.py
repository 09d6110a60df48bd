"""`fedbench reproduce --until-resolved`: the budget in cells, the plan of look 1, and a killed
run that resumes into the same seeds and table."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_mini_preset

from benchmark.cli import main
from benchmark.sweeps import resolve, statements


def test_a_budget_is_cells_or_a_time_turned_into_cells_by_the_preset():
    assert resolve.budget_cells("85", None, "toy") == 85
    assert resolve.budget_cells("15m", 10.5, "toy") == 85  # 900 s / 10.5 s
    assert resolve.budget_cells("900s", 10.5, "toy") == 85
    with pytest.raises(resolve.BudgetError, match="states no cell_seconds"):
        resolve.budget_cells("15m", None, "mini")
    with pytest.raises(resolve.BudgetError, match="expected a number of cells"):
        resolve.budget_cells("soon", 10.5, "toy")


def _ranking(values):
    return statements.rank_statements(values, resolve.LOOK_ALPHA)


def test_the_stopping_rule_stops_on_a_resolved_table():
    values = {
        "a": {1: 90.0, 2: 91.0, 3: 90.5},
        "b": {1: 70.0, 2: 71.0, 3: 70.2},
        "c": {1: 50.0, 2: 51.5, 3: 50.1},
    }
    ranking = _ranking(values)
    assert [g.mark for g in ranking.gaps] == [statements.SEPARATED] * 2
    ran = {r: [1, 2, 3] for r in values}
    plan = resolve.plan_seeds(ranking, ran, cells=9, budget=100, max_seeds=30)
    assert plan.resolved and plan.extra(ran) == {}
    assert "Stopped: every adjacent gap is ≻ or ≈." in resolve.stop_note(plan, ranking, 100, 9, 30)


def test_the_stopping_rule_continues_on_an_open_table_within_its_budget():
    values = {
        "a": {1: 90.0, 2: 91.0, 3: 90.5},
        "b": {1: 62.0, 2: 60.0, 3: 61.5},  # b - c: 1.5 points, sd 2: open at 3 seeds
        "c": {1: 58.0, 2: 61.0, 3: 60.0},
        "z": {1: 40.0, 2: 40.0, 3: 40.0},  # deterministic
    }
    ranking = _ranking(values)
    open_gap = ranking.gaps[1]
    assert open_gap.mark == statements.OPEN and 3 < open_gap.needed <= 50
    ran = {r: [1, 2, 3] for r in values}
    plan = resolve.plan_seeds(ranking, ran, cells=12, budget=100, max_seeds=50, constant=["z"])
    extra = plan.extra(ran)
    assert set(extra) == {"b", "c"}
    assert extra["b"] == list(range(4, open_gap.needed + 1))  # the seeds after the preset's, in order
    # the same table with too small a budget: nothing fits, the gap stays open and is named
    poor = resolve.plan_seeds(ranking, ran, cells=12, budget=13, max_seeds=50, constant=["z"])
    assert poor.extra(ran) == {} and poor.beyond_budget == [open_gap]
    assert "exceed the budget" in resolve.stop_note(poor, ranking, 13, 12, 50)
    capped = resolve.plan_seeds(ranking, ran, cells=12, budget=100, max_seeds=4, constant=["z"])
    assert capped.beyond_max_seeds == [open_gap]


def test_a_budget_typo_or_a_budget_without_until_resolved_is_an_error_before_any_plan(tmp_path, capsys):
    """Issue 60's walk: `reproduce toy --until-resolved --budget 15x --dry-run` exited 0 (the
    budget was read only when look 1 was about to run), and `--budget 85` alone was ignored."""
    out = ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results")]
    assert main(["reproduce", "toy", "--until-resolved", "--budget", "15x", "--dry-run", *out]) == 2
    err = capsys.readouterr().err
    assert "--budget '15x': expected a number of cells (85) or a time (15m, 900s, 1h)" in err
    assert main(["reproduce", "toy", "--budget", "85", "--dry-run", *out]) == 2
    assert "--budget 85 limits the cells of --until-resolved; add --until-resolved" in capsys.readouterr().err
    assert main(["reproduce", "toy", "--until-resolved", "--budget", "15m", "--dry-run", *out]) == 0
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def _reproduce(tmp: Path, preset: Path, *extra: str) -> int:
    return main(
        [
            "reproduce",
            str(preset),
            "--out",
            str(tmp / "runs"),
            "--results",
            str(tmp / "results"),
            "--until-resolved",
            "--budget",
            "12",
            "--max-seeds",
            "5",
            *extra,
        ]
    )


@pytest.mark.slow  # three reproductions of the mini table: 80 s on the 2-core machine under load 6
def test_until_resolved_killed_and_rerun_gives_the_seeds_and_table_of_an_uninterrupted_run(
    tmp_path, fake_data_root, monkeypatch
):
    """The tiny world's open gap needs about 32 seeds (4 s a cell here): the plan is cut to the
    first 2 extra seeds per row (the same cut in both runs) so that look 2 runs 2 cells."""
    real_plan = resolve.plan_seeds

    def short_plan(ranking, ran, cells, budget, max_seeds, constant=(), per_seed=1):
        plan = real_plan(ranking, ran, cells, 10**9, 40, constant, per_seed)
        plan.seeds = {row: seeds[: len(ran[row]) + 2] for row, seeds in plan.seeds.items()}
        return plan

    monkeypatch.setattr(resolve, "plan_seeds", short_plan)
    methods = ("zeroshot", "promptfl", "clip_adapter")
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    for folder in (whole, killed):
        folder.mkdir()
    assert _reproduce(whole, write_mini_preset(whole, fake_data_root, methods, (1, 2, 3))) == 0
    table = (whole / "results" / "table.md").read_text()
    assert "Seeds by `--until-resolved`" in table and "Seeds: 1–3: zeroshot, clip_adapter; 1–5: promptfl." in table
    assert "NOT the preset's table: seeds" not in table  # the design's seeds, not a changed table

    import benchmark.sweeps.sweep as sweep

    real, calls = sweep.run_sweep, []

    def dies_in_look_2(plan, *args, **kwargs):  # look 2 runs one cell, then the process is killed
        calls.append(len(plan.todo))
        if len(calls) == 2:
            plan.todo = plan.todo[:1]
            real(plan, *args, **kwargs)
            raise KeyboardInterrupt
        return real(plan, *args, **kwargs)

    preset = write_mini_preset(killed, fake_data_root, methods, (1, 2, 3))
    monkeypatch.setattr(sweep, "run_sweep", dies_in_look_2)
    try:
        _reproduce(killed, preset)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(sweep, "run_sweep", real)
    assert len(calls) == 2  # look 1, then the look 2 that was killed
    assert _reproduce(killed, preset) == 0
    again = (killed / "results" / "table.md").read_text()
    assert again.replace(str(killed), "") == table.replace(str(whole), "")
    names = sorted(p.name for p in (whole / "runs").glob("*_seed*"))
    assert names == sorted(p.name for p in (killed / "runs").glob("*_seed*"))
