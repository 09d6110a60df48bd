"""`--margin`: the points within which a gap is ≈ (TOST). The same table marked with a wider
margin calls a small, sure gap equivalent, everywhere the table marks gaps, and says which
margin it used."""

from __future__ import annotations

import pandas as pd
import pytest
from test_tables import long_rows

from benchmark.cli import build_parser
from benchmark.cli.args import DEFAULT_MARGIN
from benchmark.sweeps import statements
from benchmark.sweeps.table_comparisons import differences, rankings
from benchmark.sweeps.table_render import render
from benchmark.sweeps.table_stats import AVERAGE, summarize


def two_rows_two_points_apart() -> pd.DataFrame:
    """6 seeds of one dataset: `upper` 2 HM points above `lower` on every seed, give or take 0.1
    (sure of its size: separated from 0, and inside a 3-point margin, outside a 1-point one)."""
    values = {}
    for seed, noise in enumerate((0.1, -0.1, 0.05, -0.05, 0.0, 0.08), start=1):
        base = 70.0 + (-1.0, 2.0, 0.5, 1.5, -0.5, 0.0)[seed - 1]
        values[("upper", "dtd", seed)] = {"HM": base + 2.0 + noise}
        values[("lower", "dtd", seed)] = {"HM": base}
    return long_rows(values, tuned=())


def rendered(margin: float, tmp_path) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """table.md, table.csv and differences.csv of the table at `margin`, built as
    `sweep.render_cells` builds them."""
    long = two_rows_two_points_apart()
    stats = summarize(long, margin=margin)
    diffs = differences(long, "upper", "HM", margin=margin)
    ranks = rankings(long, {"dtd": "HM"}, margin=margin)
    paths = render(stats, pd.DataFrame(), tmp_path / f"margin-{margin:g}", "Margin", diffs, ranks=ranks)
    return paths["md"].read_text(), pd.read_csv(paths["csv"]), pd.read_csv(paths["differences"])


@pytest.mark.parametrize(
    ("margin", "mark", "statement", "words"),
    [(1.0, "≻", "upper ≻ lower", "1 point"), (3.0, "≈", "{upper ≈ lower}", "3 points")],
)
def test_a_gap_of_two_points_is_equivalent_only_within_a_margin_of_three(tmp_path, margin, mark, statement, words):
    md, csv, diffs = rendered(margin, tmp_path)
    # the ranking's statements (every block) and differences.csv
    for block in (AVERAGE, "dtd"):
        assert f"- {block}: {statement}" in md.splitlines()
    assert set(diffs["mark"]) == {mark}
    # table.csv's `tied`: a gap that is ≈ is not separated from the best
    lower = csv[(csv.label == "lower") & (csv.metric == "HM")]
    assert set(lower["tied"]) == {mark == "≈"}
    # the notes state the margin the marks used, in the ranking's method note and the differences' legend
    assert md.count(f"≈ equivalent within {words} (TOST") == 3  # 2 rankings + the differences
    other = "3 points" if margin == 1 else "1 point"
    assert f"within {other}" not in md


def test_the_default_margin_is_the_one_the_statistics_state():
    """reproduce and runs --plot default to statements.MARGIN (written out in cli.args so that
    --help needs no scipy)."""
    assert DEFAULT_MARGIN == statements.MARGIN
    parser = build_parser()
    assert parser.parse_args(["reproduce", "toy"]).margin == statements.MARGIN
    assert parser.parse_args(["runs", "--margin", "2.5"]).margin == 2.5


@pytest.mark.parametrize("command", [["reproduce", "toy"], ["runs"]])
@pytest.mark.parametrize("value", ["0", "-1", "wide"])
def test_a_margin_that_is_not_above_zero_is_refused(capsys, command, value):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*command, "--margin", value])
    assert exit_.value.code == 2
    assert "--margin" in capsys.readouterr().err


@pytest.mark.slow  # one reproduction of the mini table (6 cells): about 40 s on the 2-core machine under load 5
def test_reproduce_until_resolved_looks_and_renders_at_the_margin_given(tmp_path, fake_data_root, monkeypatch):
    from conftest import write_mini_preset

    from benchmark.cli import main
    from benchmark.sweeps import resolve

    real_plan, looked = resolve.plan_seeds, []

    def spy(ranking, *args, **kwargs):
        looked.append(ranking.margin)
        return real_plan(ranking, *args, **kwargs)

    monkeypatch.setattr(resolve, "plan_seeds", spy)
    preset = write_mini_preset(tmp_path, fake_data_root, ("zeroshot", "promptfl"), (1, 2, 3))
    flags = ["--out", str(tmp_path / "runs"), "--results", str(tmp_path / "results"), "--until-resolved"]
    # a budget of the 6 cells of look 1: no look 2, the table is rendered from look 1
    assert main(["reproduce", str(preset), *flags, "--budget", "6", "--margin", "2.5"]) == 0
    assert looked == [2.5]  # the stopping rule read the ranking at the margin given
    table = (tmp_path / "results" / "table.md").read_text()
    assert "≈ equivalent within 2.5 points (TOST" in table and "within 1 point" not in table
