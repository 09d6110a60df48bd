"""`fedbench runs DIR`: the runs under a folder side by side, whatever made them (`fedbench
run`, `reproduce`, `tune`). One row per run: its state, the settings that differ between
the runs (read from each run's config.yaml, or from the record a failed or stopped run
left), and its final metrics. `--plot` renders them as `fedbench reproduce` renders a
preset (`benchmark.sweeps.sweep.render_cells`): the table, the paired differences and the
figures. A single `fedbench run` draws its own curves.png with the same code.

What a folder under DIR can be (docs/run-folders.md):
  finished   NAME/summary.json (the folder appears whole when the run ends);
  resumable  .NAME.checkpoint.pt: a round checkpoint of a run that was stopped; the same
             command resumes it;
  failed     NAME.failed.json: the cell's last run raised (its error is shown).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.config import IDENTITY_KEY, ConfigError, RunConfig, build_config, fields_where, parse_yaml
from benchmark.files import atomic_write
from benchmark.runs.checkpoints import read_sidecar
from benchmark.runs.reporting import config_label
from benchmark.runs.results import read_failure_record, read_summary, read_timing
from benchmark.sweeps import statements
from benchmark.sweeps.plots import round_curves
from benchmark.sweeps.presets import Cell
from benchmark.sweeps.sweep import HEADLINE_METHOD, render_cells
from benchmark.sweeps.table_render import markdown_table

FAILED_SUFFIX = ".failed.json"
CHECKPOINT_SUFFIX = ".checkpoint.pt"
STATES = ("finished", "resumable", "failed")


@dataclass
class RunEntry:
    """One run under the folder: its name (the run folder's), state and what is known of it."""

    name: str
    folder: Path  # the run folder (it exists only for a finished run)
    state: str  # finished | resumable | failed
    config: dict[str, Any] | None  # the resolved config, None when the run left none
    metrics: dict[str, float]  # the final metrics (finished runs)
    note: str = ""  # the error of a failed run, the round a resumable run stopped after
    spread: dict[str, dict[str, Any]] = field(default_factory=dict)  # summary.json's per-client spread
    memory: dict[str, Any] = field(default_factory=dict)  # timing.json's peak memory per phase

    def settings(self) -> dict[str, Any]:
        """Run options, protocol options and method hyperparameters (under their own names), flat."""
        if self.config is None:
            return {}
        nested = ("method_args", "protocol_args")
        hidden = fields_where(compared=False)  # where files went and where it ran, not what ran
        flat = {k: v for k, v in self.config.items() if k not in (*nested, IDENTITY_KEY, *hidden)}
        for key in nested:
            flat.update(self.config.get(key) or {})
        return flat


def scan(root: Path) -> list[RunEntry]:
    """Every run under `root` (not recursive), by name; a finished run wins over the failure
    record or checkpoint of an earlier attempt."""
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder; pass the --out folder of your runs (default: runs)")
    found: dict[str, RunEntry] = {}
    for path in sorted(root.iterdir()):
        name = path.name
        if path.is_dir() and not name.startswith(".") and is_run_folder(path):
            if (entry := finished_run(path)) is not None:
                found[name] = entry
        elif name.startswith(".") and name.endswith(CHECKPOINT_SUFFIX):
            name = name[1 : -len(CHECKPOINT_SUFFIX)]
            sidecar = read_sidecar(root / name) or {}
            stopped = f"stopped after round {sidecar['round']}" if "round" in sidecar else "stopped"
            entry = RunEntry(name, root / name, "resumable", sidecar.get("config"), {}, stopped)
            found.setdefault(name, entry)
        elif path.is_file() and name.endswith(FAILED_SUFFIX):
            name = name[: -len(FAILED_SUFFIX)]
            record = read_failure_record(root / name) or {}
            entry = RunEntry(name, root / name, "failed", record.get("config"), {}, str(record.get("error", "")))
            found.setdefault(name, entry)
    # A finished run supersedes its failures; a checkpoint means the last attempt can resume.
    for entry in list(found.values()):
        if entry.state != "finished" and (root / entry.name / "summary.json").is_file():
            del found[entry.name]
    return sorted(found.values(), key=lambda e: e.name)


def is_run_folder(path: Path) -> bool:
    """Whether `path` is a finished run's folder (it holds summary.json), not a folder of runs."""
    return (Path(path) / "summary.json").is_file()


def finished_run(folder: Path) -> RunEntry | None:
    """The entry of the finished run in `folder`; None when its summary cannot be read."""
    summary = read_summary(folder)
    if summary is None:
        return None
    memory = (read_timing(folder) or {}).get("memory") or {}
    spread = summary.get("spread") or {}
    return RunEntry(folder.name, folder, "finished", _config_of(folder), dict(summary["metrics"]), "", spread, memory)


def scan_all(paths: list[Path]) -> list[RunEntry]:
    """The runs of every path, in the order given: a run folder is that run, any other folder
    the runs under it (`scan`); a run named twice (its folder and the folder above) is listed once."""
    entries: dict[Path, RunEntry] = {}
    for path in map(Path, paths):
        found = [finished_run(path)] if is_run_folder(path) else scan(path)
        for entry in filter(None, found):
            entries.setdefault(entry.folder.resolve(), entry)
    return list(entries.values())


def _config_of(folder: Path) -> dict[str, Any] | None:
    try:
        data = parse_yaml((folder / "config.yaml").read_text(), f"{folder / 'config.yaml'}")
    except (OSError, ConfigError):
        return None
    return data if isinstance(data, dict) else None


def differing(entries: list[RunEntry]) -> list[str]:
    """The settings whose values are not the same in every run, in the order they first
    appear: a run option that differs, and a method hyperparameter whose value differs
    among the runs that have it (another method's hyperparameters do not make a column:
    fourteen methods' defaults made 70 columns of dashes)."""
    known = [e.settings() for e in entries if e.config is not None]
    hyperparameters = {  # and protocol options: another protocol's make no column either
        k
        for e in entries
        if e.config is not None
        for key in ("method_args", "protocol_args")
        for k in (e.config.get(key) or {})
    }
    keys = list(dict.fromkeys(k for s in known for k in s))

    def differs(key: str) -> bool:
        values = {repr(s[key]) for s in known if key in s}
        return len(values) > 1 or (key not in hyperparameters and any(key not in s for s in known))

    return [k for k in keys if differs(k)]


def where(entries: list[RunEntry], conditions: list[str]) -> list[RunEntry]:
    """The runs whose state, run name, run options or hyperparameters match every
    KEY=VALUE of `conditions` (`fedbench runs --where method=pfedmma lr=0.01 state=failed`;
    numbers compare as numbers, `run=` matches a part of the name). VALUE may list values
    with commas, any of which matches (`method=promptfl,pfedmma`)."""
    for condition in conditions:
        key, sep, wanted = condition.partition("=")
        if not sep or not key:
            raise ConfigError(f"--where takes KEY=VALUE, got {condition!r}")
        known = {"run", "state", *(k for e in entries for k in e.settings())}
        if key not in known:
            import difflib

            close = difflib.get_close_matches(key, sorted(known), n=1)
            raise ConfigError(
                f"--where {condition}: no run has a setting {key!r}"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f". Settings of these runs: {', '.join(sorted(known))}"
            )
        entries = [e for e in entries if any(_matches(e, key, one) for one in wanted.split(","))]
    return entries


def _matches(entry: RunEntry, key: str, wanted: str) -> bool:
    if key == "run":
        return wanted in entry.name
    value = entry.state if key == "state" else entry.settings().get(key, _ABSENT)
    if value is _ABSENT:
        return False
    try:
        return float(value) == float(wanted)
    except (TypeError, ValueError):
        return _text(value) == wanted


_ABSENT = object()


def table(entries: list[RunEntry], spread: bool = False, memory: bool = False) -> pd.DataFrame:
    """One row per run: name, state, the differing settings, the final metrics, a note;
    with `spread`, per metric that differs by client its std across clients (`M std`) and
    worst client (`M worst`: value and client id); with `memory`, the peak memory per phase
    (MiB: CPU RSS, and on CUDA the allocated and reserved peaks)."""
    keys = differing(entries)
    metrics = list(dict.fromkeys(m for e in entries for m in e.metrics))
    spread_metrics = [m for m in metrics if any(m in e.spread for e in entries)] if spread else []
    extra: list[str] = []
    rows = []
    for e in entries:
        settings = e.settings()
        row = {"run": e.name, "state": e.state}
        row.update({k: _text(settings[k]) if k in settings else "–" for k in keys})
        row.update({m: round(float(e.metrics[m]), 2) if m in e.metrics else "–" for m in metrics})
        for m in spread_metrics:
            entry = e.spread.get(m)
            row[f"{m} std"] = round(float(entry["std"]), 2) if entry else "–"
            row[f"{m} worst"] = f"{entry['worst']:.2f} (c{entry['worst_client']})" if entry else "–"
        if memory:
            row.update(memory_columns(e.memory))
        extra.extend(k for k in row if k not in extra and k not in ("run", "state", *keys, *metrics))
        row["note"] = e.note
        rows.append(row)
    frame = pd.DataFrame(rows, columns=["run", "state", *keys, *metrics, *extra, "note"]).fillna("–")
    return frame if frame["note"].astype(bool).any() else frame.drop(columns="note")


def memory_columns(memory: dict[str, Any]) -> dict[str, float]:
    """timing.json's `memory` as columns: 'training RSS MiB', 'evaluation CUDA alloc MiB', ..."""
    names = {"cpu_rss_peak_mb": "RSS", "cuda_allocated_peak_mb": "CUDA alloc", "cuda_reserved_peak_mb": "CUDA reserved"}
    return {
        f"{phase} {names[key]} MiB": value
        for phase, peaks in memory.items()
        if isinstance(peaks, dict)
        for key, value in peaks.items()
        if key in names
    }


def _text(value: Any) -> str:
    return str(value) if not isinstance(value, float) else f"{value:g}"


def cells(entries: list[RunEntry]) -> list[Cell]:
    """The finished runs as table cells: one row label per method and setting that differs
    (seed and dataset are the table's own axes), read from the run folders as they are."""
    finished = [e for e in entries if e.state == "finished" and e.config is not None]
    # The run's kind is said as a table says it (`promptfl (local)`, `(FT 1)`, `(evaluated)`), not as
    # `federation=local, finetune_epochs=1, evaluate_from=/abs/path`; a path never makes a label.
    keys = [k for k in differing(finished) if k not in ("seed", "dataset", "method", *LABEL_KINDS)]
    out = []
    for e in finished:
        settings = e.settings()
        config = _run_config(e)
        if config is None:
            continue
        shown = [f"{k}={_short(settings[k])}" for k in keys if k in settings and settings[k] not in ("", None)]
        label = config_label(config)
        if shown:
            label = f"{label[:-1]}, {', '.join(shown)})" if label.endswith(")") else f"{label} ({', '.join(shown)})"
        out.append(Cell(label, config.dataset, (), config, hyperparameters="as run", folder=e.folder))
    return out


LABEL_KINDS = ("federation", "finetune_epochs", "evaluate_from")  # said by config_label
LABEL_VALUE_CHARS = 24


def _short(value: Any) -> str:
    """A setting's value as a row label shows it: a path by its last part, a long value cut."""
    text = _text(value)
    if "/" in text:
        text = Path(text).name
    return text if len(text) <= LABEL_VALUE_CHARS else text[: LABEL_VALUE_CHARS - 1] + "…"


def _run_config(entry: RunEntry) -> RunConfig | None:
    data = {k: v for k, v in (entry.config or {}).items() if k != IDENTITY_KEY}
    try:
        return build_config(data)
    except ConfigError:  # a folder written by another version of the suite: listed, not plotted
        return None


def render(
    entries: list[RunEntry],
    out: Path,
    title: str,
    spread: bool = False,
    memory: bool = False,
    margin: float = statements.MARGIN,
) -> dict[str, Path]:
    """The table, differences and figures of the finished runs (as `fedbench reproduce`
    renders a preset, ≈ within `margin` points) plus runs.md / runs.csv (the listing, with
    `table`'s spread and memory columns when asked), into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    listing = table(entries, spread, memory)
    files = {"runs_md": out / "runs.md", "runs_csv": out / "runs.csv"}
    atomic_write(files["runs_md"], f"# {title}\n\n{markdown_table(listing.set_index('run'))}\n")
    atomic_write(files["runs_csv"], listing.to_csv(index=False))
    chosen = cells(entries)
    if chosen:
        # The paired differences: the headline method's row minus each other, as for a preset
        # (or the first row when no run is of the headline method).
        # A row of the method's own federation (not its local / central / +FT / re-scored rows) first.
        plain = [c for c in chosen if c.label == c.config.method]
        reference = next(
            (c.label for c in plain + chosen if c.config.method == HEADLINE_METHOD), (plain or chosen)[0].label
        )
        rendered = render_cells(chosen, out, title, reference=reference, margin=margin)
        if rendered is not None:
            files.update(rendered[2])
    return files


def run_curves(run_dir: Path) -> Path | None:
    """curves.png of one finished run folder (accuracy by round), beside its metrics.csv."""
    config = _config_of(run_dir)
    if config is None:
        return None
    entry = RunEntry(run_dir.name, run_dir, "finished", config, {})
    run_config = _run_config(entry)
    if run_config is None:
        return None
    cell = Cell(config_label(run_config), run_config.dataset, (), run_config, folder=run_dir)
    return round_curves([cell], run_dir / "curves.png")
