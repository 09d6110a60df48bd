"""Tables and figures a reader can paste and trust."""

from __future__ import annotations

import pandas as pd

from benchmark.sweeps.tables import latex_table, paper_comparison


def stats_rows(label, grid, values, n=2, hyperparameters="paper", failed=0):
    return [
        dict(
            label=label,
            hyperparameters=hyperparameters,
            method=label,
            dataset="Average",
            grid=grid,
            metric=m,
            mean=v,
            std=0.5,
            n=n,
            failed=failed,
        )
        for m, v in values.items()
    ]


def test_latex_table_is_paste_ready():
    part = pd.DataFrame(
        stats_rows("clip_adapter", "", {"Local": 83.1, "HM": 70.0})
        + stats_rows("lora", "", {"Local": 80.0, "HM": 73.456}, n=1)
    )
    tex = latex_table(part, "The toy world (`fedbench demo`): 50% Average")
    lines = tex.splitlines()
    assert lines[:5] == [
        "\\begin{table}[t]",
        "\\centering",
        "\\caption{The toy world (fedbench demo): 50\\% Average}",
        "\\begin{tabular}{lrr}",
        "\\toprule",
    ]
    assert lines[5] == "Method & Local & HM \\\\" and lines[6] == "\\midrule"  # one header row
    assert lines[7] == "clip\\_adapter & \\textbf{83.10 $\\pm$ 0.50} & 70.00 $\\pm$ 0.50 \\\\"
    assert lines[8] == "lora & 80.00 & \\textbf{73.46} \\\\"
    assert "\\bottomrule" in lines


def test_latex_table_keeps_paper_and_tuned_rows_apart_and_never_prints_a_failed_cell_as_a_number():
    part = pd.DataFrame(
        stats_rows("lora", "", {"HM": 70.0})
        + stats_rows("lora", "", {"HM": 75.0}, hyperparameters="tuned")
        + stats_rows("promptfl", "", {"HM": float("nan")}, n=0, failed=1)
    )
    lines = latex_table(part, "t").splitlines()
    assert lines[5] == "Method & Hyperparameters & HM \\\\"
    assert lines[7:10] == [
        "lora & paper & 70.00 $\\pm$ 0.50 \\\\",
        "lora & tuned & \\textbf{75.00 $\\pm$ 0.50} \\\\",
        "promptfl & paper & failed \\\\",
    ]


def test_paper_comparison_keeps_grid_values_apart():
    stats = pd.DataFrame(
        stats_rows("promptfl", "shots=1", {"HM": 60.0}) + stats_rows("promptfl", "shots=16", {"HM": 80.0})
    )
    reference = pd.DataFrame([dict(method="promptfl", dataset="Average", metric="HM", paper=83.09, source="paper")])
    comparison = paper_comparison(stats, reference)
    assert comparison[["grid", "ours"]].values.tolist() == [["shots=1", 60.0], ["shots=16", 80.0]]


def test_dashboard_keeps_per_dataset_filters_in_their_own_panel_grids():
    from benchmark.sweeps.dashboard import dashboard_spec, panel_grids
    from benchmark.sweeps.presets import load_preset

    spec = dashboard_spec(load_preset("base2novel"), "fedbench", ("Local", "Base", "Novel", "HM"))
    grids = dict(panel_grids(spec))
    assert "Group = 'base2novel' and Config('dataset') = 'dtd'" in grids
    assert [p["title"] for p in grids["Group = 'base2novel' and Config('dataset') = 'dtd'"]] == [
        "Local / Base / Novel / HM on dtd"
    ]
    assert "HM per round" in [p["title"] for p in grids["Group = 'base2novel'"]]
    assert len(grids) == 1 + 7  # the whole table, and one grid per dataset
