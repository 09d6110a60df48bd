"""Table statistics: mean ± std over seeds, paired differences with their uncertainty, and a
radar drawn from the table's own numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmark.sweeps.plots import radar, radar_values
from benchmark.sweeps.table_comparisons import differences
from benchmark.sweeps.table_render import wide
from benchmark.sweeps.table_stats import AVERAGE, summarize


def long_rows(values: dict[tuple[str, str, int], dict[str, float]], tuned=("promptfl",)) -> pd.DataFrame:
    """(label, dataset, seed) -> {metric: value} as collect() would return them."""
    rows = []
    for (label, dataset, seed), metrics in values.items():
        for metric, value in metrics.items():
            rows.append(
                {
                    "label": label,
                    "hyperparameters": "tuned" if label in tuned else "paper",
                    "method": label,
                    "dataset": dataset,
                    "grid": "",
                    "seed": seed,
                    "metric": metric,
                    "value": value,
                }
            )
    return pd.DataFrame(rows)


def make_long(seed_count=3, datasets=("dtd", "pets")) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    values = {}
    for d, dataset in enumerate(datasets):
        for seed in range(1, seed_count + 1):
            for label, offset in (("pfedmma", 5.0), ("promptfl", 0.0), ("zeroshot", -3.0)):
                local, base, novel = (70 + offset + d + rng.normal(0, 1, 3)).tolist()
                hm = 3 / (1 / local + 1 / base + 1 / novel)
                values[(label, dataset, seed)] = {"Local": local, "Base": base, "Novel": novel, "HM": hm}
    return long_rows(values)


def test_mean_and_std_over_seeds_and_the_tuned_mark():
    long = make_long()
    stats = summarize(long)
    row = stats[(stats.label == "promptfl") & (stats.dataset == "dtd") & (stats.metric == "HM")]
    values = long[(long.label == "promptfl") & (long.dataset == "dtd") & (long.metric == "HM")]["value"]
    assert row["mean"].item() == pytest.approx(values.mean()) and row["std"].item() == pytest.approx(values.std())
    assert row["n"].item() == 3
    table = wide(stats, AVERAGE)
    assert table.index.names == ["label", "hyperparameters"]
    assert ("promptfl", "tuned") in table.index and ("pfedmma", "paper") in table.index
    assert " ± " in table.loc[("promptfl", "tuned"), "HM"]


def test_paired_differences_per_dataset_and_over_all_pairs():
    long = make_long()
    diffs = differences(long, "pfedmma", "HM")
    hm = long[long.metric == "HM"].pivot_table(index=["dataset", "seed"], columns="label", values="value")
    for baseline in ("promptfl", "zeroshot"):
        paired = hm["pfedmma"] - hm[baseline]
        for dataset in ("dtd", "pets"):
            row = diffs[(diffs.baseline == baseline) & (diffs.dataset == dataset)]
            assert row["pairs"].item() == 3
            assert row["mean_diff"].item() == pytest.approx(paired.loc[dataset].mean())
        overall = diffs[(diffs.baseline == baseline) & (diffs.dataset.str.startswith("all"))]
        assert overall["pairs"].item() == 6 and overall["mean_diff"].item() == pytest.approx(paired.mean())
        from scipy import stats

        low, high = stats.t.interval(0.95, 5, loc=paired.mean(), scale=stats.sem(paired.to_numpy()))
        assert (overall["ci_low"].item(), overall["ci_high"].item()) == pytest.approx((low, high))
        assert overall["p_t"].item() == pytest.approx(stats.ttest_1samp(paired.to_numpy(), 0).pvalue)
        assert overall["p_holm"].item() >= overall["p_t"].item()  # Holm over the two baselines
        assert overall["mark"].item() in {"≻", "≺", "≈", "?"}
        # 6 pairs: the exact sign-flip p exists (2^6 sign patterns)
        assert overall["p_signflip"].item() == pytest.approx(
            stats.permutation_test((paired.to_numpy(),), np.mean, permutation_type="samples").pvalue
        )
        per_dataset = diffs[(diffs.baseline == baseline) & (diffs.dataset == "dtd")]
        assert per_dataset["p_signflip"].isna().all()  # 3 pairs: none can reach 0.05
    assert set(diffs["baseline"]) == {"promptfl", "zeroshot"}  # the reference is never compared with itself
    again = differences(long, "pfedmma", "HM")
    pd.testing.assert_frame_equal(diffs, again)


def test_one_pair_gives_no_interval_and_no_test():
    long = make_long(seed_count=1, datasets=("toy",))
    diffs = differences(long, "pfedmma", "HM")
    assert list(diffs["pairs"]) == [1, 1]
    assert diffs[["ci_low", "ci_high", "p_t", "p_holm", "p_signflip"]].isna().all().all()
    assert diffs["seeds_needed"].isna().all()


def test_unpaired_runs_are_left_out_not_guessed():
    long = make_long()
    long = long[~((long.label == "promptfl") & (long.seed == 3))]  # promptfl's seed 3 did not run
    diffs = differences(long, "pfedmma", "HM")
    assert set(diffs[diffs.baseline == "promptfl"]["pairs"]) == {2, 4}
    assert differences(long, "nosuchmethod", "HM").empty


def test_radar_draws_the_tables_numbers(tmp_path):
    stats = summarize(make_long())
    drawn = radar_values(stats)
    table = wide(stats, AVERAGE)
    for (label, hyperparameters, _), row in drawn.iterrows():
        for metric in ("Local", "Base", "Novel", "HM"):
            shown = float(table.loc[(label, hyperparameters), metric].split(" ± ")[0])
            assert row[metric] == pytest.approx(shown, abs=0.005)
    assert radar(stats, tmp_path / "radar.png").is_file()


def test_a_grid_gives_one_polygon_per_table_row():
    long = pd.concat([make_long().assign(grid="shots=1"), make_long().assign(grid="shots=16")])
    long.loc[long.grid == "shots=16", "value"] += 10
    drawn = radar_values(summarize(long))
    assert len(drawn) == 6  # 3 labels x 2 grid points, never averaged across the grid
    hm = drawn["HM"]
    assert (hm.xs("shots=16", level="grid") - hm.xs("shots=1", level="grid")).round(6).eq(10).all()


def test_a_row_is_labelled_with_the_hyperparameters_its_preset_sets():
    from benchmark.sweeps.presets import hyperparameter_origin

    assert hyperparameter_origin({}, None) == "paper"
    assert hyperparameter_origin({}, {"lr": 0.01}) == "tuned"
    assert hyperparameter_origin({"depth": 3, "lr": 0.01}, None) == "depth=3, lr=0.01"
    # a tuned value replaces the preset's own; the rest stays named
    assert hyperparameter_origin({"n_ctx": 4, "lr": 0.5}, {"lr": 0.0135}) == "tuned, n_ctx=4"


def test_curves_that_coincide_stay_visible():
    from benchmark.sweeps.plots import curve_looks

    looks = curve_looks(["zeroshot", "promptfl", "pfedmma"])
    assert len({look["marker"] for look in looks.values()}) == 3
    # each later curve is drawn above the earlier ones, thinner and with smaller markers,
    # so an identical earlier curve shows around it
    widths = [looks[label]["linewidth"] for label in ("zeroshot", "promptfl", "pfedmma")]
    sizes = [looks[label]["ms"] for label in ("zeroshot", "promptfl", "pfedmma")]
    orders = [looks[label]["zorder"] for label in ("zeroshot", "promptfl", "pfedmma")]
    assert widths == sorted(widths, reverse=True) and len(set(widths)) == 3
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == 3
    assert orders == sorted(orders)


def test_the_spread_file_shows_the_clients_behind_each_mean(tmp_path):
    """Two seeds of one row: client_std is the mean of the runs' across-client stds, the worst
    client is the lowest value of either seed, with its seed and id."""
    import json

    from benchmark.config import RunConfig
    from benchmark.sweeps.presets import Cell
    from benchmark.sweeps.table_render import render_spread
    from benchmark.sweeps.tables import client_spread_table

    spreads = {
        1: {"Local": {"std": 2.0, "worst_client": 3, "worst": 61.0}},
        2: {"Local": {"std": 4.0, "worst_client": 5, "worst": 55.5}},
    }
    cells = []
    for seed, spread in spreads.items():
        folder = tmp_path / f"run{seed}"
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps({"metrics": {"Local": 70.0}, "spread": spread}))
        cells.append(Cell("promptfl", "toy", (), RunConfig(seed=seed), folder=folder))
    table = client_spread_table(cells)
    assert table.to_dict("records") == [
        {
            "label": "promptfl",
            "hyperparameters": "paper",
            "grid": "",
            "dataset": "toy",
            "metric": "Local",
            "n": 2,
            "client_std": 3.0,
            "worst": 55.5,
            "worst_seed": 2,
            "worst_client": 5,
        }
    ]
    files = render_spread(table, tmp_path, "T")
    assert "| promptfl | toy | Local | paper | 2 | 3.0 | 55.5 | 2 | 5 |" in files["spread_md"].read_text()
    assert client_spread_table([Cell("zeroshot", "toy", (), RunConfig(), folder=tmp_path / "missing")]).empty


def test_a_table_whose_write_fails_midway_keeps_the_last_whole_table(tmp_path, monkeypatch):
    """A full disk halfway through the spread file: the reader still finds the previous file
    whole, and no hidden file is left beside it."""
    from pathlib import Path

    from benchmark.sweeps.table_render import render_spread

    spread = pd.DataFrame(
        [{"label": "promptfl", "hyperparameters": "paper", "grid": "", "dataset": "toy", "metric": "Local", "n": 1}]
    )
    files = render_spread(spread, tmp_path, "T")
    before = {name: path.read_bytes() for name, path in files.items()}
    real_write_text = Path.write_text

    def full_disk(self, text, *args, **kwargs):
        real_write_text(self, text[: len(text) // 2], *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError, match="No space left"):
        render_spread(spread.assign(n=2), tmp_path, "T")
    monkeypatch.undo()
    assert {name: path.read_bytes() for name, path in files.items()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files.values())
