"""Tables and figures a reader can paste and trust."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmark.sweeps.table_comparisons import paper_comparison
from benchmark.sweeps.table_render import latex_table


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


# -- figures (issue 38: what a reader of radar.png and curves.png misread) -----------------


def cielab(colour) -> np.ndarray:
    """sRGB -> CIELAB (D65), for how far apart two colours look."""
    from matplotlib.colors import to_rgb

    rgb = np.array(to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ linear
    f = np.cbrt(np.maximum(xyz / np.array([0.95047, 1.0, 1.08883]), 0.008856))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


FOURTEEN = [
    "zeroshot", "promptfl", "fedotp", "fedpgp", "pfedmoap", "clip_adapter", "lora",
    "pfedmma", "fedmaple", "fedclip", "fedcocoop", "fedmvp", "fedtpg", "fedvpt",
]  # fmt: skip


def test_fourteen_methods_get_colours_a_reader_tells_apart():
    """tab20 gave promptfl and zeroshot, fedclip and fedmaple one hue in two shades; every two
    of the 14 colours are now >= 25 CIELAB units apart, and the four past tab10 are dashed."""
    from itertools import combinations

    from benchmark.sweeps.plots import method_colours, method_dashes

    colours, dashes = method_colours(FOURTEEN), method_dashes(FOURTEEN)
    closest = min(np.linalg.norm(cielab(colours[a]) - cielab(colours[b])) for a, b in combinations(FOURTEEN, 2))
    assert closest >= 25, closest
    assert [dashes[m] for m in FOURTEEN] == ["-"] * 10 + ["--"] * 4
    assert len({(colours[m], dashes[m]) for m in FOURTEEN}) == 14


def radar_stats(means: dict[str, dict[str, float]]) -> pd.DataFrame:
    return pd.DataFrame([row for label, values in means.items() for row in stats_rows(label, "", values)])


def test_a_radar_has_one_radial_range_and_its_legend_covers_no_axis_label():
    """Each axis had its own range (66.25 drawn on the outer ring, 65.83 at the centre) and the
    legend sat over the Local label. Now one range per panel, rings labelled, legend below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmark.sweeps.plots import radar_figure

    rng = np.random.default_rng(0)
    means = {m: {k: float(rng.uniform(20, 95)) for k in ("Local", "Base", "Novel", "HM")} for m in FOURTEEN}
    means["zeroshot"] = {"Local": 66.25, "Base": 65.83, "Novel": 38.12, "HM": 52.99}
    fig = radar_figure(radar_stats(means))
    try:
        (ax,) = fig.axes
        low, high = ax.get_ylim()
        every = [v for values in means.values() for v in values.values()]
        assert low <= min(every) and max(every) <= high <= 100 and low >= 0
        assert low % 5 == 0 and high % 5 == 0
        (zeroshot,) = [line for line in ax.get_lines() if line.get_label() == "zeroshot"]
        assert list(zeroshot.get_ydata()[:2]) == [66.25, 65.83]  # radius = the accuracy itself, on every axis
        assert [t.get_text() for t in ax.get_xticklabels()] == ["Local", "Base", "Novel", "HM"]
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        (legend,) = fig.legends
        box = legend.get_window_extent(renderer)
        assert len(legend.get_texts()) == 14
        for label in ax.get_xticklabels():
            assert not box.overlaps(label.get_window_extent(renderer)), label.get_text()
        assert not box.overlaps(ax.get_window_extent(renderer))
    finally:
        plt.close(fig)


def test_the_axis_range_helpers():
    from benchmark.sweeps.plots import MIN_SPAN, shared_range, y_range

    # whole fives; the centre twice the spread (at least 20 points) below the lowest value (issue 50:
    # a centre at 55 for two runs at 58-62 drew their 4-point gap across the whole radius)
    assert shared_range(np.array([65.83, 66.25])) == (45.0, 70.0)
    low, high = shared_range(np.array([58.0, 62.0]))
    assert (low, high) == (35.0, 65.0) and (62 - 58) / (high - low) < 1 / 3
    assert shared_range(np.array([1.0, 99.5])) == (0.0, 100.0)
    low, high = y_range([66.25, 66.65])  # a 0.4-point change must not fill the panel
    assert high - low == pytest.approx(MIN_SPAN) and low < 66.25 and high > 66.65
    assert y_range([99.0, 99.5])[1] == 100.0 and y_range([0.5, 1.0])[0] == 0.0
    low, high = y_range([20.0, 80.0])
    assert low < 20.0 and high > 80.0 and high - low < 70


def test_a_single_runs_curves_are_titled_with_its_method_and_seed(fedbench, fake_data_root, tmp_path):
    """curves.png of one run said "mean over clients, seeds and datasets" and named neither the
    method nor the seed; its y-axis spanned 0.4 points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from conftest import run_tiny_cell

    from benchmark.sweeps import plots
    from benchmark.sweeps.compare import run_curves

    run_tiny_cell(fedbench, "promptfl", fake_data_root, tmp_path / "runs", "--seed", "3")
    (folder,) = (tmp_path / "runs").glob("promptfl_*")
    figures = []
    original = plt.close
    plt.close = lambda fig=None: figures.append(fig)  # keep the figure to read it back
    try:
        assert run_curves(folder) == folder / "curves.png"
    finally:
        plt.close = original
    (fig,) = figures
    try:
        assert fig._suptitle.get_text() == "promptfl on dtd, seed 3: accuracy by round (over its clients)"
        for ax in fig.axes:
            low, high = ax.get_ylim()
            assert high - low >= plots.MIN_SPAN - 1e-9 and 0 <= low and high <= 100
    finally:
        original(fig)


def test_curves_of_single_runs_on_several_datasets_name_each_lines_dataset(tmp_path, monkeypatch):
    """A folder of single runs on four datasets: the title can only say "on 4 datasets", so each
    legend entry says its own; a line that is a mean over datasets names none."""
    import json

    import pandas as pd

    from benchmark.config import RunConfig
    from benchmark.sweeps import plots
    from benchmark.sweeps.presets import Cell

    def cell(label, dataset, seed=1):
        folder = tmp_path / f"{label}_{dataset}_{seed}"
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps({"metrics": {"HM": 60.0}}))
        rows = [{"round": r, "client": -1, "metric": "HM", "value": 50.0 + r} for r in (1, 2)]
        pd.DataFrame(rows).to_csv(folder / "metrics.csv", index=False)
        return Cell(label, dataset, (), RunConfig(dataset=dataset, seed=seed), folder=folder)

    legends = []

    def keep(figure, path, **kwargs):
        legends.append(sorted(t.get_text() for legend in figure.legends for t in legend.get_texts()))

    monkeypatch.setattr(plots, "atomic_figure", keep)
    singles = [cell(m, d) for m, d in [("promptfl", "dtd"), ("lora", "toy"), ("pfedmma", "pets"), ("fedotp", "food")]]
    plots.round_curves(singles, tmp_path / "curves.png")
    assert legends[-1] == ["fedotp on food", "lora on toy", "pfedmma on pets", "promptfl on dtd"]
    pooled = [cell("promptfl", "toy"), cell("lora", "dtd", 2), cell("lora", "toy", 2)]
    plots.round_curves([singles[0], *pooled], tmp_path / "curves.png")
    assert legends[-1] == ["lora", "promptfl"]
