"""`fedbench runs DIR --plot` on a folder of single runs of every kind (issue 50, item 4): rows
labelled as tables label them, no path or empty setting in a label, figures of a readable
width with one legend entry per run, whole-number round ticks, and re-scored runs kept out
of the folder by default."""

from __future__ import annotations

from pathlib import Path

from conftest import tiny_run_args
from PIL import Image

KINDS = {
    "promptfl": (),
    "promptfl (local)": ("--federation", "local"),
    "promptfl (central)": ("--federation", "central"),
    "promptfl (FT 1)": ("--finetune-epochs", 1),
}


def test_a_mixed_folder_plots_with_readable_labels(fedbench, fake_data_root, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    for flags in KINDS.values():
        done = fedbench(*tiny_run_args(fake_data_root, runs, "--rounds", 1, "--clients", 2, *flags))
        assert done.returncode == 0, done.stderr
    (first,) = [p for p in runs.iterdir() if p.name.startswith("promptfl_dtd_")]
    done = fedbench("evaluate", first)  # by default beside the folder's runs, not among them
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("fedbench evaluate: promptfl (evaluated) on dtd")
    assert "nothing trained or uploaded" in done.stdout and "B up" not in done.stdout
    assert [p.parent.parent for p in runs.rglob("*_evaluated_*/summary.json")] == [runs / "evaluated"]
    # One evaluated run placed among them on purpose (--out): labelled as such, no path in its label.
    assert fedbench("evaluate", first, "--out", runs, "--force").returncode == 0

    from benchmark.sweeps import plots

    drawn = {}
    save = plots.atomic_figure

    def keep(figure, path, **kwargs):
        drawn[Path(path).name] = {
            "legend": [t.get_text() for legend in figure.legends for t in legend.get_texts()],
            "ticks": [list(ax.get_xticks()) for ax in figure.axes if ax.get_visible() and ax.name != "polar"],
        }
        return save(figure, path, **kwargs)

    monkeypatch.setattr(plots, "atomic_figure", keep)
    done = fedbench("runs", runs, "--plot")
    assert done.returncode == 0, done.stderr
    table = (runs / "compare" / "table.md").read_text()
    rows = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| promptfl")]
    assert sorted(set(rows)) == sorted([*KINDS, "promptfl (evaluated)"])
    assert "evaluate_from" not in table and not any("/" in row for row in rows)
    # The differences are the plain federation's minus each other row, not the first label's.
    assert "## promptfl minus each baseline" in table
    assert sorted(drawn["curves.png"]["legend"]) == sorted([*KINDS, "promptfl (evaluated)"])  # one entry per run
    for ticks in drawn["curves.png"]["ticks"]:
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    for name in ("radar.png", "curves.png"):
        width, _ = Image.open(runs / "compare" / name).size
        assert width <= 2400, (name, width)  # 3189 and 4869 px before
