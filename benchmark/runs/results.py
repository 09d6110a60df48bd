"""Run folders: what one run produced, written so that a crash never looks like a result.

A run folder holds
  config.yaml      the resolved RunConfig (every method hyperparameter) and the cell's
                   identity (method source hash, weights, data: benchmark/runs/identity.py)
  environment.json code version, package versions, plugin packages, machine, torch's
                   CPU thread count (CPU reductions split across threads add in
                   another order, so the last bits of a loss can depend on it)
  partition.json   the partition manifest (client -> indices, classes) and its hash
  partition.csv    clients x classes training-image counts, and partition.png, their figure
  metrics.csv      long format: round, client, metric, value (client -1 = over clients)
  summary.json     headline metrics of the final round, parameter counts, bytes, and
                   `health`: whether training looks unstable (`training_health`)
  timing.json      wall time, and the round a resumed run continued after (it differs
                   between runs that summary.json says are the same)
It is assembled in a hidden sibling folder that takes the place of any older folder of the
run in one rename at the end (`benchmark.files.atomic_folder`), so a folder named like a run
is always complete, and a rerun's folder never goes missing while it is replaced.
"""

from __future__ import annotations

import errno
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

from benchmark.config import ConfigError, RunConfig
from benchmark.files import atomic_folder, atomic_write
from benchmark.registry import method_package, plugin_packages
from benchmark.runs.identity import save_yaml
from benchmark.runs.partition_files import plot_partition, write_partition_csv

METRICS_COLUMNS = ["round", "client", "metric", "value"]
ALL_CLIENTS = -1
PACKAGES = ("torch", "torchvision", "lightning", "open_clip_torch", "torchmetrics", "wandb", "pandas", "numpy")


@dataclass
class MetricRow:
    round: int
    client: int
    metric: str
    value: float


# The folders of the checkout whose files a run executes: a file there that git does not
# track (a new method in methods/) makes the checkout dirty, as an edited one does; untracked
# files elsewhere (runs/, a notes file) do not.
CODE_FOLDERS = ("benchmark", "methods", "data", "flower")


def code_version(root: Path | None = None) -> dict[str, Any]:
    """The package version, the checkout's commit, and whether its code differs from that
    commit (`git_dirty`: an edited tracked file, or an untracked one in CODE_FOLDERS)."""
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    version = {"fedbench": _package_version("fedbench")}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        edited = git("status", "--porcelain", "--untracked-files=no")
        untracked = git("ls-files", "--others", "--exclude-standard", "--", *CODE_FOLDERS)
        version.update(git_commit=commit, git_dirty=bool(edited or untracked))
    except (OSError, subprocess.SubprocessError):
        version.update(git_commit=None, git_dirty=None)
    return version


def environment(method: str | None = None, device: str | None = None) -> dict[str, Any]:
    import torch

    return {
        "code": code_version(),
        "method_package": method_package(method) if method else None,
        "plugin_packages": plugin_packages(),  # every installed fedbench.methods distribution
        "packages": {name: _package_version(name) for name in PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch_threads": torch.get_num_threads(),
        # The CPU kernels torch picked (AVX512, AVX2, ...): they sum floats in their own order,
        # so over a training run they move digits (docs/toy-world.md, What a table depends on).
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # ...and which CPU: an Intel Xeon and an AMD EPYC, both AVX512 to torch, gave 5 of the
        # toy table's 14 rows other digits (the BLAS picks its own kernels per CPU model).
        "cpu_model": cpu_model(),
        # The GPU model: two GPUs of different kinds round differently (tables note a mix).
        **({"device_name": torch.cuda.get_device_name(device)} if device and device.startswith("cuda") else {}),
        # The GPUs the process was given (a sweep's local workers get one each).
        **(
            {"cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"]} if "CUDA_VISIBLE_DEVICES" in os.environ else {}
        ),
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's model name as the OS reports it (Linux: /proc/cpuinfo), else None."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


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
    timing: dict[str, Any] | None = None,
    partition_counts: dict[str, Any] | None = None,
    extra: Callable[[Path], None] | None = None,
) -> Path:
    """Write the run folder atomically (see module doc); replaces an older folder of the same run.
    `partition_counts` (`partition_files.partition_table`): written as partition.csv and .png;
    `extra` writes more files into the folder being written (the run's clients.pt)."""
    run_dir = Path(run_dir)
    with atomic_folder(run_dir) as staging:
        save_yaml(config, staging / "config.yaml")
        _write_json(staging / "environment.json", environment(config.method, summary.get("device")))
        _write_json(staging / "partition.json", partition_manifest)
        if partition_counts is not None:
            write_partition_csv(partition_counts, staging / "partition.csv")
            plot_partition(partition_counts, staging / "partition.png", f"{config.protocol} on {config.dataset}")
        frame = pd.DataFrame([r.__dict__ for r in rows], columns=METRICS_COLUMNS)
        frame.to_csv(staging / "metrics.csv", index=False)
        _write_json(staging / "timing.json", timing or {})
        if extra is not None:
            extra(staging)
        _write_json(staging / "summary.json", summary)  # last: its presence marks completion
    failure_path(run_dir).unlink(missing_ok=True)  # an earlier failure of this cell is now history
    return run_dir


# Free space a run needs beyond its checkpoints: the run folder (metrics, partition manifest,
# config) is well under a megabyte for the paper's settings; the margin covers W&B's files.
RUN_FOLDER_BYTES = 64 * 2**20


def check_output_location(out: Path, needed_bytes: int | None = None, flag: str = "--out") -> None:
    """Fail before any compute when `out` (the folder `flag` names) cannot receive a run
    folder: it is a file, it cannot be created or written, or its file system lacks
    `needed_bytes` (default RUN_FOLDER_BYTES). (Found after
    training, the same problem would lose the whole run.)"""

    out = Path(out).absolute()
    existing = next(p for p in (out, *out.parents) if p.exists())  # created later, when the run ends
    if not existing.is_dir():
        what = "is a file" if existing == out else f"lies under the file {existing}"
        raise ConfigError(f"output folder {out} {what}, not a folder: choose another {flag}")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".fedbench-write-test."):
            pass
    except OSError as exc:
        where = "" if existing == out else f" (the closest folder of {out} that exists)"
        raise ConfigError(
            f"output folder {out} cannot be {'written' if existing == out else 'created'}: nothing can be written in "
            f"{existing}{where}: {why_unwritable(existing, exc)}. Choose a writable {flag}, e.g. a folder under "
            "your home or the project"
        ) from None
    needed_bytes = RUN_FOLDER_BYTES if needed_bytes is None else needed_bytes
    free = shutil.disk_usage(existing).free
    if free < needed_bytes:
        raise ConfigError(
            f"output folder {out} has {free / 2**20:.1f} MiB free; a run needs about {needed_bytes / 2**20:.0f} MiB: "
            f"free some space or choose another {flag}"
        )


def why_unwritable(folder: Path, exc: OSError) -> str:
    """Why creating a file in the existing `folder` failed, in words: the OS's message alone
    ('No such file or directory' for /proc) names neither the folder nor the cause."""
    kind = _file_system_type(folder)
    failed = f"creating a file there fails with {exc.strerror or exc} ({errno.errorcode.get(exc.errno, 'error')})"
    if kind in VIRTUAL_FILE_SYSTEMS:
        return f"it lies on a {kind!r} file system, which the kernel makes up, not storage; {failed}"
    if exc.errno == errno.EROFS:
        return f"its file system{f' ({kind})' if kind else ''} is mounted read-only; {failed}"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"this user (uid {os.getuid()}) has no permission to write there; {failed}"
    return failed


# File systems the kernel fills (not storage): a run folder cannot be made on them.
VIRTUAL_FILE_SYSTEMS = {"proc", "sysfs", "devpts", "cgroup", "cgroup2", "debugfs", "securityfs", "tracefs", "bpf"}


def _file_system_type(folder: Path) -> str | None:
    """The type of the file system `folder` lies on, from /proc/self/mounts (None elsewhere than Linux)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    best, kind = "", None
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = str(folder) == point or str(folder).startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, fields[2]
    return kind


def is_complete(run_dir: Path) -> bool:
    """Whether `run_dir` holds a finished run whose summary can be read (a damaged
    summary.json counts as missing, with a warning, so `reproduce` runs the cell again)."""
    return (Path(run_dir) / "summary.json").is_file() and read_summary(run_dir) is not None


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's summary, or None (and a warning naming the file) when it is damaged."""
    path = Path(run_dir) / "summary.json"
    try:
        summary = json.loads(path.read_text())
        metrics = summary["metrics"]
        if not isinstance(metrics, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in metrics.values()
        ):
            raise ValueError("metrics must map names to numbers")
        return summary
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        warnings.warn(
            f"{path} is damaged ({exc.__class__.__name__}: {exc}); the cell counts as missing and will be run again",
            stacklevel=2,
        )
        return None


def read_timing(run_dir: Path) -> dict[str, Any] | None:
    """The run's timing.json, or None when it is missing or unreadable (it is a record, not a result)."""
    try:
        timing = json.loads((Path(run_dir) / "timing.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return timing if isinstance(timing, dict) and "wall_seconds" in timing else None


# -- training health ---------------------------------------------------------------------------
# A run "unstable" by its own numbers: its mean training loss ended above where it started. The
# other criterion (an accuracy below half of zero-shot's) needs the zero-shot run of the same
# dataset and seed, so the table checks it (benchmark.sweeps.table_stats), not the run.


def round_mean_losses(train_loss_by_round: Mapping[int, Mapping[int, float]]) -> dict[int, float]:
    """round -> mean train loss over the round's clients (client id order, `math.fsum`: the
    same number whatever order the clients reported in, so every engine writes the same).
    Clients that logged no loss (NaN) are left out; a round with none is left out."""
    means = {}
    for round_number in sorted(train_loss_by_round):
        losses = [v for _, v in sorted(train_loss_by_round[round_number].items()) if not math.isnan(v)]
        if losses:
            means[round_number] = math.fsum(losses) / len(losses)
    return means


def training_health(mean_losses: Mapping[int, float]) -> dict[str, Any]:
    """summary.json's `health`: `unstable` when the last round's mean train loss is above the
    first round's (or not finite), with the reason in words. One round (or a method that does
    not train: no losses) cannot rise: never unstable by this criterion."""
    rounds = sorted(mean_losses)
    health: dict[str, Any] = {
        "unstable": False,
        "reasons": [],
        "train_loss_first_round": mean_losses[rounds[0]] if rounds else None,
        "train_loss_last_round": mean_losses[rounds[-1]] if rounds else None,
    }
    if not rounds:
        return health
    first, last = mean_losses[rounds[0]], mean_losses[rounds[-1]]
    if not (math.isfinite(first) and math.isfinite(last)):
        health["reasons"].append(
            f"mean train loss is not finite (round {rounds[0]}: {first}, round {rounds[-1]}: {last})"
        )
    elif len(rounds) > 1 and last > first:
        health["reasons"].append(
            f"mean train loss rose from {first:.4g} (round {rounds[0]}) to {last:.4g} (round {rounds[-1]})"
        )
    health["unstable"] = bool(health["reasons"])
    return health


def run_health(run_dir: Path, summary: Mapping[str, Any]) -> dict[str, Any]:
    """The run's `health`: summary.json's, or, for a folder written before summary.json had
    it, the same computed from metrics.csv's per-client train_loss rows."""
    if "health" in summary:
        return dict(summary["health"])
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        return training_health({})
    frame = pd.read_csv(path)
    losses = frame[(frame["metric"] == "train_loss") & (frame["client"] != ALL_CLIENTS)]
    by_round: dict[int, dict[int, float]] = {}
    for row in losses.itertuples(index=False):
        by_round.setdefault(int(row.round), {})[int(row.client)] = float(row.value)
    return training_health(round_mean_losses(by_round))


def failure_path(run_dir: Path) -> Path:
    """Where a failed run of `run_dir`'s cell is recorded (beside it, never inside it)."""
    run_dir = Path(run_dir)
    return run_dir.with_name(f"{run_dir.name}.failed.json")


def record_failure(run_dir: Path, error: str, config: dict[str, Any] | None = None) -> Path:
    """Note that the cell of `run_dir` failed: tables show it as failed, not as a gap, until
    a later run of the cell succeeds (`write_run` removes the note). `config`: the run's
    settings, which `fedbench runs` shows beside the error."""
    path = failure_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"error": error, "host": platform.node(), "pid": os.getpid()}
    record = {**record, **({"config": config} if config is not None else {})}
    atomic_write(path, _json_text(record))  # `fedbench runs` may read it meanwhile
    return path


def read_failure_record(run_dir: Path) -> dict[str, Any] | None:
    """The whole failure record of `run_dir`'s cell (error, host, pid, config), or None."""
    try:
        record = json.loads(failure_path(run_dir).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def read_failure(run_dir: Path) -> str | None:
    """The recorded error of the cell's last failed run, or None when none is recorded."""
    path = failure_path(run_dir)
    if not path.is_file():
        return None
    try:
        return str(json.loads(path.read_text()).get("error", "unknown error"))
    except (OSError, ValueError, AttributeError):
        return "unknown error (the failure record is damaged)"


def read_metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(Path(run_dir) / "metrics.csv")


def _write_json(path: Path, data: Any) -> None:
    path.write_text(_json_text(data))


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
