"""What a table tells a reader at a glance: the best row of each column, the rows not
separated from it (paired t-test, Holm-corrected), the ranking's statements, n per row, and unstable runs
(train loss rose, or an accuracy below half of zero-shot's) marked, never hidden."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import tiny_config
from test_tables import long_rows

from benchmark.runs.results import round_mean_losses, run_health, training_health
from benchmark.sweeps.table_comparisons import differences, rankings
from benchmark.sweeps.table_render import block_notes, latex_table, render, wide
from benchmark.sweeps.table_stats import AVERAGE, SPREAD_LIMIT, assess, summarize, unstable_runs

DATASETS = ("dtd", "pets")
# best minus close, per (dataset, seed): small, of both signs, mean > 0 (so best stays best)
CLOSE_GAP = {"dtd": (1.0, -0.8, 0.3), "pets": (0.9, -0.7, 0.4)}


def three_methods() -> pd.DataFrame:
    """3 seeds x 2 datasets: `best` clearly best, `close` within noise of it, `worse` 10 points
    below, zero-shot far below; the seeds move every method together (as a seed's partition does)."""
    values = {}
    for d, dataset in enumerate(DATASETS):
        for s, seed in enumerate((1, 2, 3)):
            base = 70.0 + 3 * d + (-1.0, 2.0, 0.5)[s]
            rows = {
                "zeroshot": base - 20,
                "best": base,
                "close": base - CLOSE_GAP[dataset][s],
                "worse": base - 10 + (0.2, -0.1, 0.1)[s],
            }
            for label, value in rows.items():
                values[(label, dataset, seed)] = {"Base": value, "HM": value - 5}
    return long_rows(values, tuned=())


def marks(stats: pd.DataFrame, dataset: str, metric: str) -> dict[str, tuple[bool, bool]]:
    part = stats[(stats.dataset == dataset) & (stats.metric == metric)]
    return {r.label: (bool(r.best), bool(r.tied)) for r in part.itertuples()}


@pytest.mark.parametrize("dataset", [*DATASETS, AVERAGE])
@pytest.mark.parametrize("metric", ["Base", "HM"])
def test_best_and_not_distinguishable_rows_are_marked_per_block(dataset, metric):
    stats = summarize(three_methods())
    assert marks(stats, dataset, metric) == {
        "zeroshot": (False, False),
        "best": (True, False),
        "close": (False, True),
        "worse": (False, False),
    }
    part = stats[(stats.dataset == dataset) & (stats.metric == metric)].set_index("label")
    assert part.loc["close", "pairs"] == (6 if dataset == AVERAGE else 3)  # seeds x datasets in the Average
    assert part.loc["close", "diff_low"] <= 0 <= part.loc["close", "diff_high"]
    assert part.loc["worse", "diff_low"] > 0


def test_the_average_interval_is_the_one_of_differences_csv():
    long = three_methods()
    stats = summarize(long)
    overall = differences(long, "best", "HM").set_index(["baseline", "dataset"])
    for label in ("close", "worse"):
        row = stats[(stats.dataset == AVERAGE) & (stats.metric == "HM") & (stats.label == label)].iloc[0]
        theirs = overall.loc[(label, "all (seeds x datasets)")]
        assert (row.pairs, row.diff_mean, row.diff_low, row.diff_high) == pytest.approx(
            (theirs.pairs, theirs.mean_diff, theirs.ci_low, theirs.ci_high)
        )
        per_dataset = stats[(stats.dataset == "dtd") & (stats.metric == "HM") & (stats.label == label)].iloc[0]
        assert (per_dataset.diff_low, per_dataset.diff_high) == pytest.approx(
            (overall.loc[(label, "dtd")].ci_low, overall.loc[(label, "dtd")].ci_high)
        )


def test_md_tex_and_csv_show_the_marks_the_n_and_a_legend(tmp_path):
    long = three_methods()
    stats = summarize(long)
    ranks = rankings(long, {"dtd": "HM", "pets": "HM"})
    paths = render(stats, pd.DataFrame(), tmp_path, "Marks", ranks=ranks)
    md = paths["md"].read_text()
    # the statements above the tables: best and close are not separated, the rest are
    (average,) = [line for line in md.splitlines() if line.startswith("- Average: ")]
    assert average.startswith("- Average: {best ? close} (open: ≈ ") and average.endswith("≻ worse ≻ zeroshot")
    assert "### Ranking of Average" in md and "Holm-corrected over the 3 gaps" in md
    assert "†" not in md and "bootstrap interval of the paired difference" not in md
    block = md.split("## Average")[1].split("## dtd")[0]
    row = {line.split(" | ")[0].lstrip("| "): line for line in block.splitlines() if line.startswith("| ")}
    assert row["label"].startswith("| label | hyperparameters | n |")
    assert "**" in row["best"] and "**" not in row["close"] and "**" not in row["worse"]
    assert all(f"| {n} |" in row[label] for label, n in (("best", 3), ("close", 3)))  # n seeds per row
    assert "n = 6 pairs (seeds x datasets)" in block
    assert "n = 3 pairs (seeds)" in md.split("## dtd")[1]
    csv = pd.read_csv(paths["csv"])
    assert {"best", "tied", "pairs", "diff_low", "diff_high", "unstable", "unstable_reasons"} <= set(csv.columns)
    marked = csv[(csv.dataset == AVERAGE) & (csv.metric == "HM")].set_index("label")
    assert bool(marked.loc["best", "best"]) and bool(marked.loc["close", "tied"]) and not marked.loc["worse", "tied"]
    tex = paths["tex"].read_text().split("\\end{table}")[0]  # the Average table comes first
    assert "Method & $n$ & Base & HM" in tex
    (best_line,) = [line for line in tex.splitlines() if line.startswith("best &")]
    (close_line,) = [line for line in tex.splitlines() if line.startswith("close &")]
    assert best_line.count("\\textbf{") == 2 and "dagger" not in tex and "\\textbf{" not in close_line
    assert "not separated from the best" in tex and "n = 6 pairs" in tex


def test_one_pair_marks_only_the_best_and_says_why(tmp_path):
    long = three_methods()
    long = long[(long.dataset == "dtd") & (long.seed == 1)]
    stats = summarize(long)
    for dataset in ("dtd", AVERAGE):
        part = stats[stats.dataset == dataset]
        assert set(part[part.best].label) == {"best"} and not part.tied.any()
    md = render(stats, pd.DataFrame(), tmp_path, "One pair")["md"].read_text()
    assert "With n = 1 pair" in md and "no interval exists" in md and "†" not in md


def test_a_failed_row_is_never_best_or_tied():
    long = three_methods()
    stats = summarize(long)
    stats.loc[stats.label == "best", ["mean", "std"]] = float("nan")  # as `summarize` shows a failed cell
    stats.loc[stats.label == "best", "failed"] = 3
    again = assess(stats, long)
    part = again[(again.dataset == "dtd") & (again.metric == "HM")].set_index("label")
    assert not part.loc["best", "best"] and not part.loc["best", "tied"]
    assert part.loc["close", "best"]  # the next one up


def test_latex_without_assessment_columns_keeps_its_old_form():
    stats = summarize(three_methods())
    plain = stats[stats.dataset == AVERAGE].drop(columns=["best", "tied"])
    tex = latex_table(plain, "t", marks=True)
    assert "$n$" not in tex and "dagger" not in tex and "\\textbf{" in tex


# -- unstable runs ------------------------------------------------------------------------------
def test_training_health_flags_a_rising_loss_only():
    rising = training_health({1: 1.2, 2: 0.9, 3: 1.5})
    assert rising["unstable"] and rising["reasons"] == ["mean train loss rose from 1.2 (round 1) to 1.5 (round 3)"]
    assert (rising["train_loss_first_round"], rising["train_loss_last_round"]) == (1.2, 1.5)
    assert training_health({1: 1.2, 2: 1.5, 3: 1.1}) == {
        "unstable": False,
        "reasons": [],
        "train_loss_first_round": 1.2,
        "train_loss_last_round": 1.1,
    }  # a bump in between is not the criterion: first versus last
    assert not training_health({1: 1.2})["unstable"]  # one round cannot rise
    assert not training_health({})["unstable"]  # a method that does not train
    assert training_health({1: 1.0, 2: float("inf")})["unstable"]


def test_round_means_ignore_client_order_and_unlogged_losses():
    a = round_mean_losses({1: {0: 0.1, 1: 0.2, 2: 0.7}, 2: {2: float("nan")}})
    b = round_mean_losses({1: {2: 0.7, 0: 0.1, 1: 0.2}})
    assert a == b == {1: pytest.approx(1.0 / 3)}


def test_a_run_writes_its_health_and_old_folders_get_it_from_metrics_csv(fake_data_root, tmp_path):
    from benchmark.runs.runner import run_experiment

    result = run_experiment(
        tiny_config(fake_data_root, tmp_path, method="promptfl", rounds=2), progress=False
    )  # 2 rounds: first and last differ
    summary = json.loads((result.run_dir / "summary.json").read_text())
    health = summary["health"]
    assert set(health) == {"unstable", "reasons", "train_loss_first_round", "train_loss_last_round"}
    metrics = pd.read_csv(result.run_dir / "metrics.csv")
    losses = metrics[(metrics.metric == "train_loss") & (metrics.client >= 0)].groupby("round")["value"].mean()
    assert health["train_loss_first_round"] == pytest.approx(losses.loc[1])
    assert health["train_loss_last_round"] == pytest.approx(losses.loc[2])
    assert health["unstable"] == (losses.loc[2] > losses.loc[1])
    legacy = {k: v for k, v in summary.items() if k != "health"}  # a folder written before `health`
    recomputed = run_health(result.run_dir, legacy)
    assert recomputed["unstable"] == health["unstable"]
    assert recomputed["train_loss_last_round"] == pytest.approx(health["train_loss_last_round"])


def with_unstable(long: pd.DataFrame) -> pd.DataFrame:
    long = long.copy()
    long["unstable"] = ""
    rose = (long.label == "close") & (long.dataset == "pets") & (long.seed == 2)
    long.loc[rose, "unstable"] = "mean train loss rose from 1.1 (round 1) to 2.3 (round 5)"
    collapsed = (long.label == "worse") & (long.dataset == "dtd") & (long.seed == 3) & (long.metric == "HM")
    zeroshot_hm = long[(long.label == "zeroshot") & (long.dataset == "dtd") & (long.seed == 3) & (long.metric == "HM")]
    long.loc[collapsed, "value"] = 0.49 * zeroshot_hm["value"].item()
    return long


def test_unstable_runs_by_loss_and_by_half_of_zero_shot():
    long = with_unstable(three_methods())
    flagged = unstable_runs(long).set_index(["label", "dataset", "seed"])
    assert sorted(flagged.index) == [("close", "pets", 2), ("worse", "dtd", 3)]
    assert "train loss rose" in flagged.loc[("close", "pets", 2), "reasons"]
    assert (
        flagged.loc[("worse", "dtd", 3), "reasons"].startswith("HM ")
        and "below half of zero-shot's" in (flagged.loc[("worse", "dtd", 3), "reasons"])
    )
    # the other runs of `worse` are 10 points below best, i.e. well above half of zero-shot: not flagged
    stats = summarize(long)
    rows = stats[stats.metric == "Base"].set_index(["label", "dataset"])
    assert rows.loc[("worse", "dtd"), "unstable"] == 1 and rows.loc[("worse", "pets"), "unstable"] == 0
    assert rows.loc[("worse", AVERAGE), "unstable"] == 1 and rows.loc[("close", AVERAGE), "unstable"] == 1
    assert rows.loc[("close", AVERAGE), "unstable_reasons"].startswith("pets seed 2: mean train loss rose")
    assert (stats[stats.label.isin(["zeroshot", "best"])]["unstable"] == 0).all()


def test_unstable_rows_are_shown_with_a_mark_and_a_note(tmp_path):
    stats = summarize(with_unstable(three_methods()))
    table = wide(stats, "dtd", marks=True)
    assert table.loc[("worse", "paper"), "unstable"] == "‡ 1 run" and table.loc[("best", "paper"), "unstable"] == ""
    assert table.loc[("worse", "paper"), "HM"] != ""  # the number stays: flagged, never hidden
    paths = render(stats, pd.DataFrame(), tmp_path, "Unstable")
    dtd = paths["md"].read_text().split("## dtd")[1].split("## pets")[0]
    assert "‡ unstable: worse (paper), seed 3: HM" in dtd and "below half of zero-shot's" in dtd
    assert "‡ unstable = a run whose mean train loss ended above" in dtd
    assert "worse$^\\ddagger$ &" in paths["tex"].read_text()
    csv = pd.read_csv(paths["csv"])
    assert csv[(csv.label == "worse") & (csv.dataset == "dtd")]["unstable"].eq(1).all()


def test_a_table_without_zero_shot_checks_the_loss_only():
    long = with_unstable(three_methods())
    long = long[long.method != "zeroshot"]
    flagged = unstable_runs(long)
    assert list(zip(flagged.label, flagged.dataset, flagged.seed)) == [("close", "pets", 2)]


def test_a_row_whose_headline_varies_over_seeds_beyond_the_limit_is_flagged_not_hidden(tmp_path):
    long = three_methods()
    # `worse` on dtd: HM 60 +- 8 over the seeds (std 8 > SPREAD_LIMIT), Base untouched; pets stays steady
    wide_hm = (long.label == "worse") & (long.dataset == "dtd") & (long.metric == "HM")
    long.loc[wide_hm, "value"] = long.loc[wide_hm, "seed"].map({1: 52.0, 2: 60.0, 3: 68.0})
    stats = summarize(long, headline={"dtd": "HM", "pets": "HM"})
    rows = stats.set_index(["label", "dataset", "metric"])
    assert rows.loc[("worse", "dtd", "HM"), "std"] == pytest.approx(8.0) and 8.0 > SPREAD_LIMIT
    # the flag is the row's (every metric of it), keyed on the headline only
    assert rows.loc[("worse", "dtd", "Base"), "spread"] == pytest.approx(8.0)
    assert rows.loc[("worse", "pets", "HM"), "spread"] == 0 and (stats[stats.label != "worse"]["spread"] == 0).all()
    assert (summarize(long)["spread"] == 0).all()  # no headline named: nothing flagged
    # one headline per dataset (a table of two protocols): pets' is Base, steady; the Average is not flagged
    by_dataset = summarize(long, headline={"dtd": "HM", "pets": "Base"}).set_index(["label", "dataset", "metric"])
    assert by_dataset.loc[("worse", "dtd", "Base"), "spread"] == pytest.approx(8.0)
    assert (by_dataset.xs(AVERAGE, level="dataset")["spread"] == 0).all()
    table = wide(stats, "dtd", marks=True)
    assert table.loc[("worse", "paper"), "unstable"] == "§ std 8.00" and table.loc[("best", "paper"), "unstable"] == ""
    assert table.loc[("worse", "paper"), "HM"].startswith("60.00 ± 8.00")  # shown as it is (here † as well)
    paths = render(stats, pd.DataFrame(), tmp_path, "Spread")
    dtd = paths["md"].read_text().split("## dtd")[1].split("## pets")[0]
    assert "§ spread: worse (paper), std 8.00 over seeds of the headline metric, above 5 points" in dtd
    assert "worse$^\\S$ &" in paths["tex"].read_text()
    csv = pd.read_csv(paths["csv"])
    assert csv[(csv.label == "worse") & (csv.dataset == "dtd")]["spread"].eq(8.0).all()


def test_a_row_selected_on_test_is_marked_and_never_bold_or_tied():
    """The authors' rule (select_round = best_local_test) selects on the data it reports: the
    row is shown, marked, and kept out of the best and the tied, even when it is highest."""
    long = three_methods()
    long["selected"] = "final"
    lifted = long[long.label == "best"].copy()
    lifted["label"], lifted["value"], lifted["selected"] = "authors", lifted["value"] + 5, "best_local_test"
    stats = summarize(pd.concat([long, lifted], ignore_index=True))
    for dataset in (*DATASETS, AVERAGE):
        found = marks(stats, dataset, "HM")
        assert found["authors"] == (False, False) and found["best"] == (True, False)
    table = wide(stats, "dtd", marks=True)
    assert table.loc[("authors", "paper"), "round"] == "selected on test"
    assert table.loc[("best", "paper"), "round"] == "final"
    notes = " ".join(block_notes(stats[stats.dataset == "dtd"], "dtd"))
    assert "selected on test: authors (paper)" in notes and "never bold or tied" in notes
    assert "round" not in wide(summarize(long), "dtd", marks=True).columns  # only when a row selects


def test_a_tuning_flag_is_marked_with_its_reason():
    stats = summarize(three_methods())
    stats["tuning"] = ["lr=0.03 is the top of its range" if label == "worse" else "" for label in stats["label"]]
    table = wide(stats, "dtd", marks=True)
    assert table.loc[("worse", "paper"), "unstable"] == "¶ tuning" and table.loc[("best", "paper"), "unstable"] == ""
    notes = block_notes(stats[stats.dataset == "dtd"], "dtd")
    assert any(n.startswith("¶ tuning: worse (paper)") and "top of its range" in n for n in notes)
