"""Weights & Biases tracking that never stops the benchmark.

One W&B run per experiment:
  config   the resolved RunConfig (every method hyperparameter), the device actually used,
           the config hash and the cell's identity; no local paths;
  tags     what distinguishes runs of one group: the preset, filters, `--set` overrides;
  history  keyed by `round` (`define_metric`): train loss (mean over clients), bytes, the lr
           (`lr/mean`, `lr/min`, `lr/max` over clients of the mean lr of each one's steps), and
           Local / Base / Novel / HM (or the protocol's metrics, then `--metrics`' extras as
           `<request>/<name>`) at every evaluated round;
           per-client numbers go in the `per_client` table, never one key per client;
  summary  the final metrics (the last evaluated round), parameter counts, bytes, wall time;
  artifact the run folder (config.yaml, metrics.csv, summary.json, ...).
A run that raises is finished with exit code 1 (W&B shows it failed). Mode 'auto' logs
online when a login is present and offline otherwise; offline runs are written under
$WANDB_DIR (default: the run's --out folder) and the exact `wandb sync` command is printed.
Any tracking failure becomes a warning.
"""

from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from benchmark.config import RunConfig, fields_where
from benchmark.runs.checkpoints import saved_wandb_run_id
from benchmark.runs.identity import cell_hash, cell_identity, resolved_config, run_name
from benchmark.runs.preparation import resolve_device

ROUND = "round"
DEFAULT_PROJECT = "fedbench"


class Tracker:
    """Wraps one wandb run; every call is guarded so tracking failures only warn."""

    def __init__(self, run: Any | None, pending: tuple | None = None) -> None:
        self.run = run
        self._pending = pending  # _start's arguments, until `start` (a deferred run)
        self.started = pending is None

    def start(self) -> None:
        """Start a deferred W&B run: `run_experiment` calls it once the run is built (method,
        data, partition) and its rounds begin, so that a run refused before then (a bad
        --clients, a plugin without configure_optimizers) leaves no W&B run behind."""
        if not self.started:
            self.started = True
            self.run = _start(*self._pending)

    @classmethod
    @contextmanager
    def for_run(
        cls,
        config: RunConfig,
        job_type: str | None = None,
        name: str | None = None,
        run_config: dict[str, Any] | None = None,
        tags: list[str] | tuple[str, ...] = (),
        deferred: bool = False,
    ) -> Iterator["Tracker"]:
        """`name` and `run_config` replace the cell's run name and config (the table run).
        `deferred`: W&B starts at `tracker.start()` (a run's first round), not now."""
        arguments = (config, job_type, name, run_config, tags)
        tracker = cls(None, arguments) if deferred else cls(_start(*arguments))
        try:
            yield tracker
        except BaseException:
            tracker.finish(exit_code=1)  # W&B marks the run failed
            raise
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
        values = {
            ROUND: log.round,
            "bytes_up": log.bytes_up,
            "bytes_down": log.bytes_down,
            "round_seconds": log.total_seconds,
        }
        if log.train_loss:
            values["train_loss/mean"] = sum(log.train_loss.values()) / len(log.train_loss)
        if log.lr:  # over clients, each client-round's mean step lr (`round_lr`); per client in metrics.csv
            rates = list(log.lr.values())
            values.update({"lr/mean": sum(rates) / len(rates), "lr/min": min(rates), "lr/max": max(rates)})
        self._guard("log", self.run.log, values)

    def log_evaluation(self, round_number: int, metrics: dict[str, float]) -> None:
        """The protocol's metrics (mean over clients) of an evaluated round."""
        if self.run is None:
            return
        self._guard("log", self.run.log, {ROUND: round_number, **metrics})

    def log_final(
        self, summary: dict[str, Any], per_client: dict[int, dict[str, float]], timing: dict[str, Any] | None = None
    ) -> None:
        def log() -> None:
            import wandb

            for key, value in summary["metrics"].items():
                self.run.summary[key] = value
            for key in ("trainable_params", "uploaded_params", "bytes_up_total", "bytes_down_total"):
                self.run.summary[key] = summary[key]
            for metric, spread in summary.get("spread", {}).items():  # per-client spread: std and worst client
                for key, value in spread.items():
                    self.run.summary[f"{metric}/{key}"] = value
            if timing:
                self.run.summary["wall_seconds"] = timing["wall_seconds"]
                for phase, peaks in timing.get("memory", {}).items():
                    for key, value in peaks.items() if isinstance(peaks, dict) else ():
                        self.run.summary[f"memory/{phase}/{key}"] = value
            metrics = list(next(iter(per_client.values())).keys()) if per_client else []
            table = wandb.Table(columns=["client", *metrics])
            for cid, values in per_client.items():
                table.add_data(cid, *(values[m] for m in metrics))
            self.run.log({ROUND: summary["round"], "per_client": table})

        self._guard("final log", log)

    def log_run_folder(self, run_dir: Path) -> None:
        """The finished run folder as an artifact (type 'run-folder', named after the run)."""

        def log() -> None:
            import wandb

            artifact = wandb.Artifact(Path(run_dir).name, type="run-folder")
            # File by file: add_dir prints "Adding directory to artifact ... Done." on every run.
            for path in sorted(p for p in Path(run_dir).rglob("*") if p.is_file()):
                artifact.add_file(str(path), name=path.relative_to(run_dir).as_posix())
            self.run.log_artifact(artifact)

        self._guard("artifact", log)

    def log_artifacts(self, tables: dict[str, Any], images: dict[str, Path]) -> None:
        def log() -> None:
            import wandb

            payload = {name: wandb.Table(dataframe=frame) for name, frame in tables.items()}
            payload.update({name: wandb.Image(str(path)) for name, path in images.items()})
            self.run.log(payload)

        self._guard("table log", log)

    def finish(self, exit_code: int = 0) -> None:
        if self.run is None:
            return
        run, self.run = self.run, None
        offline = run.settings.mode == "offline" if hasattr(run, "settings") else False
        folder = Path(run.dir).parent if getattr(run, "dir", None) else None
        try:
            run.finish(exit_code=exit_code)
        except Exception as exc:
            warnings.warn(f"W&B finish failed ({exc.__class__.__name__}: {exc})")
            return
        if offline and folder is not None:
            print(f"W&B: offline run saved in {folder}; upload it with: wandb sync {folder}", file=sys.stderr)


def wandb_config(config: RunConfig) -> dict[str, Any]:
    """What a W&B run records as its config: the resolved run, the device actually used,
    the hash naming its run folder and the rest of its identity."""

    unlogged = fields_where(logged=False)  # paths and W&B's own settings: not what a run is
    values = {k: v for k, v in resolved_config(config).to_dict().items() if k not in unlogged}
    values["device"], values["precision"] = resolve_device(config)
    identity = cell_identity(config)
    values.update(
        config_hash=cell_hash(config),
        method_version=identity["method"],
        weights=identity["weights"],
        data=identity["data"],
    )
    return values


def run_directory(config: RunConfig) -> Path:
    """Where W&B writes its files: $WANDB_DIR when set, else the run's --out folder."""
    return Path(os.environ.get("WANDB_DIR") or config.out)


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


def _start(
    config: RunConfig,
    job_type: str | None,
    name: str | None = None,
    run_config: dict[str, Any] | None = None,
    tags: list[str] | tuple[str, ...] = (),
) -> Any | None:
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
        directory = run_directory(config)
        directory.mkdir(parents=True, exist_ok=True)
        resumed = _resumed_run_id(config) if name is None else None
        kwargs = dict(
            **run_naming(config, name, tags),
            job_type=job_type or config.method,
            config=run_config if run_config is not None else wandb_config(config),
            dir=str(directory),
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, console="off", x_disable_stats=True, init_timeout=init_timeout()),
            # A run resuming from a round checkpoint continues its W&B run instead of starting another.
            **({"id": resumed, "resume": "allow"} if resumed else {}),
        )
        run = None
        if mode == "online":
            try:
                run = wandb.init(mode="online", **kwargs)
            except Exception as exc:
                _server_unreachable = True
                warnings.warn(
                    f"W&B did not answer within {init_timeout():g} s ({exc.__class__.__name__}: "
                    f"{str(exc).splitlines()[0] if str(exc) else ''}); this and later runs of this process log "
                    f"offline under {directory / 'wandb'} (`wandb sync` uploads them later; {INIT_TIMEOUT_ENV} "
                    "sets the wait)"
                )
        if run is None:
            run = wandb.init(mode="offline", **kwargs)
        run.define_metric(ROUND)
        run.define_metric("*", step_metric=ROUND)  # every history key is plotted against the round
        return run
    except Exception as exc:
        warnings.warn(f"W&B could not start ({exc.__class__.__name__}: {exc}); the run goes on untracked")
        return None


def run_naming(config: RunConfig, name: str | None = None, tags=()) -> dict[str, Any]:
    """Project, entity, group, name and tags of a W&B run. Each is the run option (a flag,
    the YAML, `--set`), else W&B's environment variable (WANDB_PROJECT, WANDB_ENTITY,
    WANDB_RUN_GROUP, WANDB_NAME, WANDB_TAGS), else the suite's default. `wandb.init` would
    ignore the variables once given values, so they are read here. The user's tags join the
    suite's own (`tags`: the preset, filters, overrides); `name` (a table's run) is kept."""
    env = os.environ
    user_tags = config.wandb_tags or env.get("WANDB_TAGS", "")
    return dict(
        project=config.wandb_project or env.get("WANDB_PROJECT") or DEFAULT_PROJECT,
        entity=config.wandb_entity or env.get("WANDB_ENTITY") or None,
        group=config.wandb_group or env.get("WANDB_RUN_GROUP") or f"{config.protocol}-{config.dataset}",
        name=name or config.wandb_name or env.get("WANDB_NAME") or run_name(config),
        tags=list(dict.fromkeys([*tags, *(t.strip() for t in user_tags.split(",") if t.strip())])),
    )


def _resumed_run_id(config: RunConfig) -> str | None:

    return saved_wandb_run_id(Path(config.out) / run_name(config))


def _has_netrc_login() -> bool:
    netrc = Path.home() / ".netrc"
    return netrc.is_file() and "api.wandb.ai" in netrc.read_text(errors="ignore")
