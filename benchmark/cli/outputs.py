"""The files a command writes where the user says (`--plot OUT.png`, `--csv OUT.csv`, `--out`):
checked before any data loads or model builds, so a typo in an output path is an error
naming the flag (exit 2) and never a traceback after the work is done. The folder is made
when the file is written (`make_parent`), not when checked: a command refused later leaves
no empty folder behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmark.errors import UserError


def figure_formats() -> list[str]:
    """The file extensions matplotlib writes figures in (png, pdf, svg, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase  # lazy: only a command that draws

    common = ["png", "pdf", "svg"]  # named first in messages
    return common + sorted(set(FigureCanvasBase.get_supported_filetypes()) - set(common))


def check_output_file(path: str | Path, flag: str, formats: list[str] | None = None) -> Path:
    """`path` as a file the command can write: not a folder, its extension among `formats`
    (when given), under a folder that exists or can be made and is writable."""
    path = Path(path).expanduser()
    if path.is_dir():  # said first: "the name has no extension" would misread `--plot OUT/` for a folder
        raise UserError(
            f"{flag} {path} is a folder; pass a file name, e.g. {path / ('out.' + (formats or ['csv'])[0])}"
        )
    if formats is not None:
        suffix = path.suffix.lower().lstrip(".")
        if suffix not in formats:
            what = f"'.{suffix}' is not a format it writes" if suffix else "the name has no extension"
            raise UserError(
                f"{flag} {path}: {what}; end the file name with one of {', '.join('.' + f for f in formats)} "
                f"(e.g. {path.with_suffix('.' + formats[0]).name if path.name else 'out.' + formats[0]})"
            )
    check_output_folder(path.parent, flag, shown=path)
    return path


def check_output_folder(folder: str | Path, flag: str, shown: Path | None = None) -> Path:
    """`folder` as one the command can write into: it exists or can be made, and is writable."""
    folder = Path(folder).expanduser().absolute()
    shown = shown if shown is not None else folder
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise UserError(f"{flag} {shown}: {existing} is a file, not a folder; pass a path whose folders are folders")
    # A file made and removed, not os.access: root may "write" anywhere by permissions, yet
    # nothing can be made in /proc or on a read-only mount (issue 60's walk: a traceback after
    # the work). The reason in words is results.py's, imported on this error only (pandas, torch).
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".fedbench-write-test."):
            pass
    except OSError as exc:
        from benchmark.runs.results import why_unwritable

        made = "" if existing == folder else f" (the closest folder of {folder} that exists, so it cannot be made)"
        raise UserError(
            f"{flag} {shown}: {existing} is not writable{made}: {why_unwritable(existing, exc)}; pass a path in a "
            "writable folder"
        ) from None
    return folder


def make_parent(path: Path) -> Path:
    """Make `path`'s folder (and the ones above it) before writing `path`."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return Path(path)


def check_not_another_tables_folder(results: str | Path, table: str, what: str) -> None:
    """`results` is not the folder this checkout ships for another preset (results/OTHER):
    `tune toy --results results/toy_baselines` wrote toy's tuning record among
    toy_baselines' shipped files, and `reproduce` would render one table over another's.
    `what`: what the command writes there, for the message."""
    from benchmark.sweeps.presets import PRESET_DIR, available_presets

    folder = Path(results).expanduser().absolute()
    shipped = {(Path.cwd() / "results").resolve(), (PRESET_DIR.parents[1] / "results").resolve()}
    if folder.name != table and folder.name in available_presets() and folder.parent.resolve() in shipped:
        raise UserError(
            f"--results {results} is the folder of table {folder.name!r} (its shipped files), not of {table!r}: "
            f"{what} of {table} go to results/{table}, or to a folder of your own (--results mine)"
        )
