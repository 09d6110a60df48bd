"""Run folders: what one run produced, written so that a crash never looks like a result.

A run folder holds
  config.yaml      the resolved RunConfig
  environment.json code version, package versions, machine
  partition.json   the partition manifest (client -> indices, classes) and its hash
  metrics.csv      long format: round, client, metric, value (client -1 = over clients)
  summary.json     headline metrics of the final round, parameter counts, bytes, wall time
It is assembled in a hidden sibling folder and renamed into place at the end, so a
folder named like a run is always complete.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.config import RunConfig, save_yaml

METRICS_COLUMNS = ["round", "client", "metric", "value"]
ALL_CLIENTS = -1
PACKAGES = ("torch", "torchvision", "lightning", "open_clip_torch", "torchmetrics", "wandb", "pandas", "numpy")


@dataclass
class MetricRow:
    round: int
    client: int
    metric: str
    value: float


def code_version() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    version = {"fedbench": _package_version("fedbench")}
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        version.update(git_commit=commit, git_dirty=bool(dirty))
    except (OSError, subprocess.SubprocessError):
        version.update(git_commit=None, git_dirty=None)
    return version


def environment() -> dict[str, Any]:
    return {
        "code": code_version(),
        "packages": {name: _package_version(name) for name in PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def write_run(
    run_dir: Path,
    config: RunConfig,
    rows: list[MetricRow],
    summary: dict[str, Any],
    partition_manifest: dict[str, Any],
) -> Path:
    """Write the run folder atomically (see module doc); replaces an older folder of the same run."""
    run_dir = Path(run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in run_dir.parent.glob(f".{run_dir.name}.*.partial"):  # left by a killed process
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.", suffix=".partial", dir=run_dir.parent))
    try:
        save_yaml(config, staging / "config.yaml")
        _write_json(staging / "environment.json", environment())
        _write_json(staging / "partition.json", partition_manifest)
        frame = pd.DataFrame([r.__dict__ for r in rows], columns=METRICS_COLUMNS)
        frame.to_csv(staging / "metrics.csv", index=False)
        _write_json(staging / "summary.json", summary)  # last: its presence marks completion
        if run_dir.exists():
            old = run_dir.with_name(f".{run_dir.name}.old-{os.getpid()}")
            os.replace(run_dir, old)
            os.replace(staging, run_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, run_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return run_dir


def is_complete(run_dir: Path) -> bool:
    return (Path(run_dir) / "summary.json").is_file()


def read_summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((Path(run_dir) / "summary.json").read_text())


def read_metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(Path(run_dir) / "metrics.csv")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
