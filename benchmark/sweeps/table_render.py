"""A table written out: table.md, table.csv and table.tex, and spread.md beside them.

`render` writes the stats of `benchmark.sweeps.table_stats` (with the differences and
rankings of `benchmark.sweeps.table_comparisons`) as Markdown, CSV and LaTeX: every row says
whether its hyperparameters are the paper's or `fedbench tune`'s, and each block's marks are
explained under it (`block_notes`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from benchmark.files import atomic_write
from benchmark.sweeps import statements
from benchmark.sweeps.table_stats import AVERAGE, SPREAD_LIMIT


def seeds_note(long: pd.DataFrame) -> list[str]:
    """The seeds behind the table's rows, as one note: 'Seeds: 1–3 (every row).' or, when rows
    ran different seeds (`fedbench reproduce --until-resolved`), each set with its rows."""
    if long.empty:
        return []
    by_row = long.groupby("label", sort=False)["seed"].agg(lambda seeds: tuple(sorted(set(seeds))))
    groups: dict[tuple, list[str]] = {}
    for label, seeds in by_row.items():
        groups.setdefault(seeds, []).append(label)

    def text(seeds: tuple) -> str:
        contiguous = len(seeds) > 2 and seeds[-1] - seeds[0] == len(seeds) - 1
        return f"{seeds[0]}–{seeds[-1]}" if contiguous else ", ".join(map(str, seeds))

    if len(groups) == 1:
        return [f"Seeds: {text(next(iter(groups)))} (every row)."]
    return ["Seeds: " + "; ".join(f"{text(seeds)}: {', '.join(labels)}" for seeds, labels in groups.items()) + "."]


def ranking_table(ranking: statements.Ranking) -> pd.DataFrame:
    """The rows of a ranking as the table prints them: rank by mean, the 95 % rank interval,
    n, the mean with its 95 % t interval, and the mark to the next row with P(beats next)."""
    rows = []
    for k, row in enumerate(ranking.rows):
        gap = ranking.gaps[k] if k < len(ranking.gaps) else None
        interval = "" if np.isnan(ranking.low[k]) else f" [{ranking.low[k]:.2f}, {ranking.high[k]:.2f}]"
        rows.append(
            {
                "rank": k + 1,
                "label": row,
                "rank interval": f"{ranking.rank_low[k]}–{ranking.rank_high[k]}",
                "n": ranking.n[k],
                "mean [95 % t]": f"{ranking.means[k]:.2f}{interval}",
                "vs next": gap.text() if gap else "",
                "P(beats next)": f"{gap.beats:.2f} [{gap.beats_low:.2f}, {gap.beats_high:.2f}]" if gap else "",
            }
        )
    return pd.DataFrame(rows).set_index("rank")


def wide(stats: pd.DataFrame, dataset: str, marks: bool = False) -> pd.DataFrame:
    """Rows = method label (+ grid), columns = metrics, cells 'mean ± std'. With `marks` (and
    the columns of `assess`): the best cell of a column in bold, a column `n` (seeds behind the row's means) first, and a column
    `unstable` when a row of the block is flagged: ‡ and the number of its unstable runs, §
    and the std of a wide spread, ¶ when its tuned value was flagged by `fedbench tune` (the
    `tuning` column), and a column `round` when a row reports the round it selected on test."""
    part = stats[stats["dataset"] == dataset].copy()
    marked = marks and "best" in part.columns
    part["cell"] = [_fmt(m, s, n, f) for m, s, n, f in zip(part["mean"], part["std"], part["n"], part["failed"])]
    if marked:
        part["cell"] = [f"**{c}**" if b else c for c, b in zip(part["cell"], part["best"])]
    index = ["label", "hyperparameters", "grid"] if (part["grid"] != "").any() else ["label", "hyperparameters"]
    table = part.pivot_table(index=index, columns="metric", values="cell", aggfunc="first", sort=False)
    table = table[[m for m in dict.fromkeys(part["metric"]) if m in table.columns]]
    table.columns.name = None
    if marked:
        rows = part.groupby(index, sort=False)
        counts = rows["n"].agg(["min", "max"]).reindex(table.index)
        table.insert(0, "n", [_n_text(lo, hi) for lo, hi in zip(counts["min"], counts["max"])])
        flagged = rows["unstable"].max().reindex(table.index)
        spread = rows["spread"].max().reindex(table.index)
        tuning = (rows["tuning"].max() if "tuning" in part.columns else pd.Series("", index=spread.index)).reindex(
            table.index
        )
        if (flagged > 0).any() or (spread > 0).any() or (tuning.fillna("") != "").any():
            table["unstable"] = [
                ", ".join(
                    ([f"‡ {k} run{'s' if k > 1 else ''}"] if k > 0 else [])
                    + ([f"§ std {sd:.2f}"] if sd > 0 else [])
                    + (["¶ tuning"] if isinstance(tf, str) and tf else [])
                )
                for k, sd, tf in zip(flagged, spread, tuning)
            ]
        on_test = rows["on_test"].max().reindex(table.index) if "on_test" in part.columns else None
        if on_test is not None and on_test.astype(bool).any():
            table["round"] = ["selected on test" if t else "final" for t in on_test.astype(bool)]
    return table


def _n_text(low: int, high: int) -> str:
    """The number of seeds behind a row ('–' for a row with no finished seed)."""
    low, high = int(low), int(high)
    return "–" if high == 0 else (str(high) if low == high else f"{low}–{high}")


def block_notes(part: pd.DataFrame, dataset: str) -> list[str]:
    """What the marks of one block mean and the n behind them, and every unstable row with its
    reasons (plain text; `render` writes them under the block in table.md and table.tex)."""
    if "best" not in part.columns or part.empty:
        return []
    notes = []
    pairing = "seeds x datasets" if dataset == AVERAGE else "seeds"
    compared = part[~part["best"] & (part["failed"] == 0) & part["mean"].notna()]
    if not compared.empty:
        pairs = sorted(set(compared["pairs"].astype(int)))
        shown = str(pairs[0]) if len(pairs) == 1 else f"{pairs[0]}-{pairs[-1]}"
        if pairs[-1] < 2:
            notes.append(
                f"Bold: the best mean of its column. With n = {shown} pair ({pairing}) no interval exists, so no "
                "other row is marked as indistinguishable from the best: compare these numbers with care."
            )
        else:
            notes.append(
                f"Bold: the best mean of its column; n = {shown} pairs ({pairing}) with it. Which rows it is "
                "separated from: the ranking below (headline metric) and table.csv's `tied` (not separated from the "
                "best by the paired t-test, Holm-corrected over the block's rows; every metric)."
            )
    elif part["best"].any():
        notes.append("Bold: the best mean of its column.")
    unstable = part[part["unstable"] > 0].drop_duplicates(["label", "hyperparameters", "grid"])
    for row in unstable.itertuples(index=False):
        notes.append(f"‡ unstable: {_row_name(row)}, {row.unstable_reasons}.")
    if not unstable.empty:
        notes.append(
            "‡ unstable = a run whose mean train loss ended above its first round's, or whose accuracy is below half "
            "of zero-shot's on the same dataset and seed; its numbers are shown (and averaged) as they are."
        )
    if "tuning" in part.columns:
        for row in (
            part[part["tuning"].fillna("") != ""]
            .drop_duplicates(["label", "hyperparameters", "grid"])
            .itertuples(index=False)
        ):
            notes.append(f"¶ tuning: {_row_name(row)}: `fedbench tune` flagged its value: {row.tuning} (tuning.md).")
    on_test = part[part["on_test"].astype(bool)] if "on_test" in part.columns else part.iloc[0:0]
    for row in on_test.drop_duplicates(["label", "hyperparameters", "grid"]).itertuples(index=False):
        notes.append(
            f"selected on test: {_row_name(row)} reports, per run, the round with the best mean Local on the test "
            "split it is scored on (the official code's rule); it is never bold or tied against final-round rows."
        )
    wide_spread = part[part["spread"] > 0].drop_duplicates(["label", "hyperparameters", "grid"])
    for row in wide_spread.itertuples(index=False):
        notes.append(
            f"§ spread: {_row_name(row)}, std {row.spread:.2f} over seeds of the headline metric, above "
            f"{SPREAD_LIMIT:g} points: its mean moves with the draw more than most gaps between rows (the run "
            "folders hold each seed's numbers)."
        )
    return notes


def _row_name(row) -> str:
    """How a block's note names a table row: 'label (hyperparameters) grid'."""
    return " ".join(x for x in (row.label, f"({row.hyperparameters})", row.grid) if x)


def _fmt(mean: float, std: float, n: int, failed: int = 0) -> str:
    if failed:
        return f"failed ({failed} of {n + failed} seeds)" if n else "failed"
    return f"{mean:.2f} ± {std:.2f}" if n > 1 else f"{mean:.2f}"


def render(
    stats: pd.DataFrame,
    comparison: pd.DataFrame,
    out_dir: Path,
    title: str,
    diffs: pd.DataFrame | None = None,
    notes: Sequence[str] = (),
    ranks: Mapping[tuple[str, str], statements.Ranking] | None = None,
) -> dict[str, Path]:
    """Write table.md, table.csv (long stats, with the columns of `assess`), table.tex,
    paper_comparison.csv and differences.csv (`differences`); `notes` are lines printed under
    the title; each block's marks are explained under it (`block_notes`); `ranks` (`rankings`)
    give the statements above the tables and each block's ranking under its table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    datasets = list(dict.fromkeys(stats["dataset"]))
    order = ([AVERAGE] if AVERAGE in datasets else []) + [d for d in datasets if d != AVERAGE]
    ranks = ranks or {}
    md = _heading(title, notes, ranks)
    tex = []
    for dataset in order:
        part = stats[stats["dataset"] == dataset]
        md += _block(stats, part, dataset, ranks)
        tex.append(latex_table(part, f"{title}: {dataset}", marks=True))
    if diffs is not None and not diffs.empty:
        md += _differences_section(diffs)
    if not comparison.empty:
        shown = comparison if (comparison["grid"] != "").any() else comparison.drop(columns="grid")
        md += ["## Paper comparison", "", markdown_table(shown.round(2).set_index(["method", "dataset", "metric"])), ""]
    paths = {"md": out_dir / "table.md", "csv": out_dir / "table.csv", "tex": out_dir / "table.tex"}
    atomic_write(paths["md"], "\n".join(md))
    atomic_write(paths["csv"], stats.to_csv(index=False))
    atomic_write(paths["tex"], "\n".join(tex))
    if not comparison.empty:
        paths["paper"] = out_dir / "paper_comparison.csv"
        atomic_write(paths["paper"], comparison.to_csv(index=False))
    if diffs is not None and not diffs.empty:
        paths["differences"] = out_dir / "differences.csv"
        atomic_write(paths["differences"], diffs.to_csv(index=False))
    return paths


def _heading(title: str, notes: Sequence[str], ranks: Mapping[tuple[str, str], statements.Ranking]) -> list[str]:
    """table.md's lines above the first block: the title, how to read a cell, `notes`, and
    what the seeds support (each ranking's headline)."""
    md = [
        f"# {title}",
        "",
        "Mean ± std over seeds (n = number of seeds; one seed shows no ±); bold = best, ‡ = unstable, § = a wide spread over seeds (each block's notes say how, with the n behind them); Average = per-seed mean over datasets "
        "(HM averaged per run); failed = a run of the cell failed (`fedbench reproduce` retries it). "
        "hyperparameters: paper = the method's defaults (and the preset's run settings), "
        "tuned = chosen by `fedbench tune` on validation data, name=value = set by the preset.",
        "",
        *notes,
        *([""] if notes else []),
    ]
    if ranks:
        md += [
            "What the seeds support (headline metric; ≻ separated, ≈ equivalent, ? open: docs/reading-a-row.md):",
            "",
        ]
        md += [f"- {dataset}{f' ({grid})' if grid else ''}: {r.headline()}" for (dataset, grid), r in ranks.items()]
        md += [""]
    return md


def _block(
    stats: pd.DataFrame, part: pd.DataFrame, dataset: str, ranks: Mapping[tuple[str, str], statements.Ranking]
) -> list[str]:
    """table.md's lines of one dataset block: its table, its notes, and its rankings."""
    table = wide(stats, dataset, marks=True)
    notes_here = block_notes(part, dataset)
    md = [f"## {dataset}", "", markdown_table(table), "", *notes_here, *([""] if notes_here else [])]
    for (block, grid), ranking in ranks.items():
        if block == dataset:
            pairing = "seeds (each seed's mean over datasets)" if dataset == AVERAGE else "seeds"
            md += [
                f"### Ranking of {dataset}{f' ({grid})' if grid else ''}",
                "",
                markdown_table(ranking_table(ranking)),
                "",
                statements.method_note(ranking, pairing),
                "",
            ]
    return md


def _differences_section(diffs: pd.DataFrame) -> list[str]:
    """table.md's section of `differences`: the reference minus each baseline, with how to read it."""
    reference = diffs["reference"].iloc[0]
    return [
        f"## {reference} minus each baseline",
        "",
        "Paired run by run (same dataset, grid and seed); interval: 95 % t interval of the mean difference; "
        f"p_t: two-sided paired t-test, p_holm: Holm-adjusted over the baselines; mark: ≻ {reference} above, "
        f"≺ below (at alpha {diffs.attrs.get('alpha', statements.ALPHA):g}), ≈ equivalent within {statements.points(diffs.attrs.get('margin', statements.MARGIN))} (TOST), ? open with the seeds it needs at "
        f"{statements.POWER * 100:g} % power; p_signflip: exact sign-flip test, empty below "
        f"{statements.SIGNFLIP_MIN_PAIRS} pairs (its smallest p, 2/2^n, cannot reach 0.05 there). One pair "
        "gives no interval and no test.",
        "",
        markdown_table(diffs.drop(columns=["reference"]).round(2).set_index(["baseline", "grid", "dataset"])),
        "",
    ]


def latex_table(part: pd.DataFrame, caption: str, marks: bool = False) -> str:
    """A booktabs table ready to paste: one header row, right-aligned numbers, the best mean
    of each column in bold (ties all bold), a failed cell as `failed` (never a number), a
    column saying paper/tuned/the preset's values when any row is not the paper's, the caption escaped for LaTeX. With
    `marks` (and the columns of `assess`): bold is `assess`'s best, $^\\ddagger$ an unstable row's label, a column $n$ (seeds)
    follows the method, and the notes of `block_notes` follow the tabular."""
    marked = marks and "best" in part.columns
    metrics = list(dict.fromkeys(part["metric"]))
    has_grid = (part["grid"] != "").any()
    has_tuned = (part["hyperparameters"] != "paper").any()
    keys = ["label", "hyperparameters", "grid"]
    rows = list(dict.fromkeys(zip(*(part[k] for k in keys))))
    best = {m: part.loc[(part["metric"] == m) & (part["failed"] == 0), "mean"].max() for m in metrics}
    header = [
        "Method",
        *(["Hyperparameters"] if has_tuned else []),
        *(["Setting"] if has_grid else []),
        *(["$n$"] if marked else []),
        *metrics,
    ]
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{latex_escape(caption)}}}",
        f"\\begin{{tabular}}{{l{'l' if has_tuned else ''}{'l' if has_grid else ''}{'r' if marked else ''}"
        f"{'r' * len(metrics)}}}",
        "\\toprule",
        " & ".join(h if h == "$n$" else latex_escape(h) for h in header) + " \\\\",
        "\\midrule",
    ]
    for label, hyperparameters, grid in rows:
        here = part[(part["label"] == label) & (part["hyperparameters"] == hyperparameters) & (part["grid"] == grid)]
        flagged = marked and (here["unstable"] > 0).any()
        spread = marked and (here["spread"] > 0).any()
        cells = [
            latex_escape(label) + ("$^\\ddagger$" if flagged else "") + ("$^\\S$" if spread else ""),
            *([latex_escape(hyperparameters)] if has_tuned else []),
            *([latex_escape(grid)] if has_grid else []),
            *([latex_escape(_n_text(here["n"].min(), here["n"].max()))] if marked else []),
        ]
        cells += [_latex_number(here[here["metric"] == metric], best[metric], marked) for metric in metrics]
        lines.append(" & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}"]
    if marked:
        notes = block_notes(part, str(part["dataset"].iloc[0])) if not part.empty else []
        for note in notes:
            text = latex_escape(note).replace("‡", "$^\\ddagger$").replace("§", "\\S{}")
            lines.append(f"\\par\\smallskip{{\\footnotesize {text}}}")
    lines += ["\\end{table}", ""]
    return "\n".join(lines)


def _latex_number(row: pd.DataFrame, best: float, marked: bool) -> str:
    """One metric's cell of a LaTeX row (`row`: its stats row, empty when the metric is
    missing): `--`, `failed`, or the mean (± std) in bold when it is the best (`assess`'s
    with `marked`, else the column's highest mean `best` at two decimals)."""
    if row.empty:
        return "--"
    mean, std, n, failed = row[["mean", "std", "n", "failed"]].iloc[0]
    if failed:
        return latex_escape(_fmt(mean, std, n, failed))
    text = f"{mean:.2f}" + (f" $\\pm$ {std:.2f}" if n > 1 else "")
    is_best = bool(row["best"].iloc[0]) if marked else round(mean, 2) == round(best, 2)
    return f"\\textbf{{{text}}}" if is_best else text


LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "`": "",
}


def latex_escape(text: str) -> str:
    """Plain text for LaTeX; backticks (Markdown code marks in preset titles) are dropped."""
    return "".join(LATEX_SPECIALS.get(c, c) for c in str(text))


def render_spread(spread: pd.DataFrame, out_dir: Path, title: str) -> dict[str, Path]:
    """spread.md and spread.csv beside the table: the clients behind each mean."""
    shown = spread if (spread["grid"] != "").any() else spread.drop(columns="grid")
    md = [
        f"# {title}: spread across clients",
        "",
        "The table's numbers are means over clients. Here, per row, dataset and metric: client_std = the "
        "standard deviation across clients (mean over the n seeds), worst = the lowest client's value of any "
        "seed, with that seed and client id. Per run: `fedbench runs RUN_FOLDERS --spread`.",
        "",
        markdown_table(shown.round(2).set_index(["label", "dataset", "metric"])),
        "",
    ]
    paths = {"spread_md": out_dir / "spread.md", "spread": out_dir / "spread.csv"}
    atomic_write(paths["spread_md"], "\n".join(md))
    atomic_write(paths["spread"], spread.to_csv(index=False))
    return paths


def markdown_table(table: pd.DataFrame) -> str:
    """A GitHub Markdown table without the optional `tabulate` dependency."""
    frame = table.reset_index()
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join("" if pd.isna(v) else str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body])
