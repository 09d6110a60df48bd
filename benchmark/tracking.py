"""Weights & Biases tracking that never stops the benchmark.

One W&B run per experiment: config, per-round metrics, the final summary and a
per-client table. Mode 'auto' (default) logs online when a login is present and offline
otherwise; 'offline' writes under `<out>/wandb` (`wandb sync` uploads it later);
'disabled' does nothing. Any tracking failure becomes a warning, and an online start that
gets no answer within a short timeout falls back to offline logging (one warning).
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from benchmark.config import RunConfig


class Tracker:
    """Wraps one wandb run; every call is guarded so tracking failures only warn."""

    def __init__(self, run: Any | None) -> None:
        self.run = run

    @classmethod
    @contextmanager
    def for_run(cls, config: RunConfig, job_type: str | None = None) -> Iterator["Tracker"]:
        tracker = cls(_start(config, job_type))
        try:
            yield tracker
        finally:
            tracker.finish()

    def _guard(self, what: str, fn, *args, **kwargs) -> None:
        if self.run is None:
            return
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # tracking must never stop the benchmark
            warnings.warn(f"W&B {what} failed ({exc.__class__.__name__}: {exc}); the run goes on untracked")

    def log_round(self, log) -> None:
        if self.run is None:
            return
        values = {f"train_loss/client_{c}": v for c, v in log.train_loss.items()}
        values.update(bytes_up=log.bytes_up, bytes_down=log.bytes_down, round_seconds=log.total_seconds)
        if log.train_loss:
            values["train_loss/mean"] = sum(log.train_loss.values()) / len(log.train_loss)
        self._guard("log", self.run.log, values, step=log.round)

    def log_final(
        self, summary: dict[str, Any], per_client: dict[int, dict[str, float]], timing: dict[str, Any] | None = None
    ) -> None:
        def log() -> None:
            import wandb

            for key, value in summary["metrics"].items():
                self.run.summary[key] = value
            for key in ("trainable_params", "uploaded_params", "bytes_up_total", "bytes_down_total"):
                self.run.summary[key] = summary[key]
            if timing:
                self.run.summary["wall_seconds"] = timing["wall_seconds"]
            metrics = list(next(iter(per_client.values())).keys()) if per_client else []
            table = wandb.Table(columns=["client", *metrics])
            for cid, values in per_client.items():
                table.add_data(cid, *(values[m] for m in metrics))
            self.run.log({"per_client": table, **{f"final/{k}": v for k, v in summary["metrics"].items()}})

        self._guard("final log", log)

    def log_artifacts(self, tables: dict[str, Any], images: dict[str, Path]) -> None:
        def log() -> None:
            import wandb

            payload = {name: wandb.Table(dataframe=frame) for name, frame in tables.items()}
            payload.update({name: wandb.Image(str(path)) for name, path in images.items()})
            self.run.log(payload)

        self._guard("table log", log)

    def finish(self) -> None:
        if self.run is not None:
            self._guard("finish", self.run.finish)
            self.run = None


# How long an online start may take before the run logs offline instead. W&B's own default
# (90 s) stalled every cell of a sweep on a machine with a key but no network.
INIT_TIMEOUT_ENV = "FEDBENCH_WANDB_INIT_TIMEOUT"
DEFAULT_INIT_TIMEOUT = 20.0
_server_unreachable = False  # set by the first failed online start: later runs go offline at once


def init_timeout() -> float:
    try:
        return float(os.environ.get(INIT_TIMEOUT_ENV, DEFAULT_INIT_TIMEOUT))
    except ValueError:
        return DEFAULT_INIT_TIMEOUT


def _start(config: RunConfig, job_type: str | None) -> Any | None:
    global _server_unreachable
    if config.wandb == "disabled":
        return None
    try:
        import wandb

        mode = config.wandb
        logged_in = bool(os.environ.get("WANDB_API_KEY")) or _has_netrc_login()
        if mode == "auto":
            mode = "online" if logged_in else "offline"
        elif mode == "online" and not logged_in:
            warnings.warn("W&B: no login found (run `wandb login`); logging offline instead")
            mode = "offline"
        if mode == "online" and _server_unreachable:
            mode = "offline"
        directory = Path(config.out)
        directory.mkdir(parents=True, exist_ok=True)
        resumed = _resumed_run_id(config)
        kwargs = dict(
            project=config.wandb_project,
            group=config.wandb_group or f"{config.protocol}-{config.dataset}",
            job_type=job_type or config.method,
            name=config.run_name(),
            config=config.to_dict(),
            dir=str(directory),
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, init_timeout=init_timeout()),
            # A run resuming from a round checkpoint continues its W&B run instead of starting another.
            **({"id": resumed, "resume": "allow"} if resumed else {}),
        )
        if mode == "online":
            try:
                return wandb.init(mode="online", **kwargs)
            except Exception as exc:
                _server_unreachable = True
                warnings.warn(
                    f"W&B did not answer within {init_timeout():g} s ({exc.__class__.__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}); this and later runs of this process log "
                    f"offline under {directory / 'wandb'} (`wandb sync` uploads them later; {INIT_TIMEOUT_ENV} "
                    "sets the wait)"
                )
        return wandb.init(mode="offline", **kwargs)
    except Exception as exc:
        warnings.warn(f"W&B could not start ({exc.__class__.__name__}: {exc}); the run goes on untracked")
        return None


def _resumed_run_id(config: RunConfig) -> str | None:
    from benchmark.checkpoints import saved_wandb_run_id

    return saved_wandb_run_id(Path(config.out) / config.run_name())


def _has_netrc_login() -> bool:
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
