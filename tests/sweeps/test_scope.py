"""A table says what it is: a subset, overrides, other weights or partial data are named in its
title and notes, and only the paper's cells are compared with the paper (issue 35, item 4)."""

from __future__ import annotations

import pandas as pd
from conftest import write_mini_preset

from benchmark.cli import main
from benchmark.sweeps.presets import load_preset
from benchmark.sweeps.scope import table_scope


def test_an_overridden_subset_table_says_so_and_compares_nothing(tmp_path, fake_data_root, capsys):
    preset = write_mini_preset(tmp_path, fake_data_root, methods=("zeroshot",), paper_table="base2novel")
    results = tmp_path / "results"
    args = ["reproduce", str(preset), "--out", str(tmp_path / "runs"), "--results", str(results)]
    assert main([*args, "--set", "rounds=1", "clients=2"]) == 0
    table = (results / "table.md").read_text()
    title = table.splitlines()[0]
    assert title.startswith("# Mini table -- NOT the paper's table: ")
    assert "1 of 7 datasets" in title and "--set rounds=1 clients=2" in title and "partial data (dtd)" in title
    assert "Settings changed from the preset's (`--set`): rounds=1, clients=2" in table
    assert "Partial data: dtd has 12 of the release's 47 classes." in table
    assert (
        "Datasets: 1 of the preset's 7 have finished cells" in table
        and "The Average is over the datasets shown only" in table
    )
    assert "No paper comparison: these cells are not run as the paper's are." in table
    assert "## Paper comparison" not in table and not (results / "paper_comparison.csv").exists()


def test_other_weights_than_the_presets_are_named():
    preset = load_preset("base2novel")
    cells = preset.cells({"pretrained": "none"}, datasets=["dtd"], methods=["pfedmma"], seeds=[1])
    scope = table_scope(preset, cells, cells, {"pretrained": "none"}, {})
    assert scope.weights == "none (random initialization) instead of the preset's openai"
    assert "Weights: none (random initialization) instead of the preset's openai." in scope.notes()
    assert "NOT the paper's table" in scope.title(preset.title) and not scope.cells_are_the_papers
    assert "1 of 7 datasets; 1 of 8 methods; 1 of 3 seeds" in scope.summary()


def test_the_full_table_is_titled_as_the_preset():
    preset = load_preset("base2novel")
    cells = preset.cells({"out": "elsewhere", "device": "cuda"})
    scope = table_scope(preset, cells, cells, {"out": "elsewhere", "device": "cuda"}, {})
    assert scope.complete and scope.title(preset.title) == preset.title and scope.notes() == []


def test_the_papers_average_is_compared_only_for_rows_with_every_dataset():
    """Paper cells (no overrides, full data), but pfedmma ran 1 of the 7 datasets: its Average
    is not the paper's Average. promptfl ran all 7; lora ran nothing (its gap stays visible)."""
    preset = load_preset("base2novel")
    every = [d["name"] for d in preset.datasets]
    cells = preset.cells({}, methods=["promptfl", "pfedmma"], seeds=[1])
    finished = [c for c in cells if c.label == "promptfl" or c.dataset == "dtd"]
    scope = table_scope(preset, cells, finished, {}, {})
    assert scope.cells_are_the_papers and not scope.complete
    rows = [("promptfl", d, 80.0) for d in [*every, "Average"]] + [("pfedmma", d, 70.0) for d in ("dtd", "Average")]
    stats = pd.DataFrame([{"method": m, "label": m, "dataset": d, "metric": "HM", "mean": v} for m, d, v in rows])
    comparison = pd.DataFrame(
        [
            {"method": m, "dataset": "Average", "metric": "HM", "ours": o, "paper": 80.0}
            for m, o in (("promptfl", 80.0), ("pfedmma", 70.0), ("lora", float("nan")))
        ]
    )
    kept = scope.comparison(comparison, stats)
    assert sorted(kept["method"]) == ["lora", "promptfl"]
    assert "The paper's Average is compared only for rows with every dataset of the preset." in scope.notes()


def test_seeds_beyond_the_presets_are_named_in_the_title_and_notes():
    """`reproduce --seeds 4` on a 3-seed preset renders seed 4 with the preset's seeds: the table
    must not pass for the preset's 3-seed table."""
    preset = load_preset("base2novel")
    shown = preset.cells({}, methods=["promptfl"], datasets=["dtd"]) + preset.cells(
        {}, methods=["promptfl"], datasets=["dtd"], seeds=[4]
    )
    scope = table_scope(preset, shown, shown, {}, {})
    assert scope.extra_seeds == [4] and not scope.complete and scope.cells_are_the_papers
    assert "seeds 4 beyond the preset's" in scope.title(preset.title)
    assert any(
        n.startswith("Seeds 4 are not the preset's (3 listed): each row's mean and std pool") for n in scope.notes()
    )
