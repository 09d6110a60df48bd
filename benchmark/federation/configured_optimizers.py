"""What a method's `configure_optimizers` returns, read into optimizers and scheduler configs.

The forms are Lightning's documented ones, read as a Trainer reads them (its optimizers and
`lr_scheduler_configs`: `tests/federation/test_configured_optimizers.py` compares every
form with a Trainer's reading), by code of our own: Lightning's parser is private API, and
its generic path (a runtime protocol check per object) cost a tenth of what is left of a
tiny-CLIP client-round beyond the model. What a Trainer only warns about (an unknown key,
which it then ignores) is refused here with a message naming it; what local training cannot
do (`ReduceLROnPlateau` needs a monitored metric) is refused by the client loop.

The forms:
  - an optimizer;
  - a list or tuple of optimizers;
  - two lists, `([optimizers], [schedulers])` (the second may be a lone scheduler);
  - `{"optimizer": o, "lr_scheduler": s, "monitor": m}`, "lr_scheduler" and "monitor" optional;
  - a list or tuple of such dicts.
A scheduler is an `LRScheduler` or `{"scheduler": s, "interval": "step" | "epoch",
"frequency": k, "name": ...}` (Lightning's `LRSchedulerConfig` fields).
"""

from __future__ import annotations

import warnings
from dataclasses import fields
from typing import Any

import torch
from lightning.pytorch.utilities.types import LRSchedulerConfig
from torch.optim.lr_scheduler import OneCycleLR, ReduceLROnPlateau

FORMS = (
    "an optimizer, a list of optimizers, ([optimizers], [schedulers]), "
    '{"optimizer": o, "lr_scheduler": s} or a list of such dicts'
)
SCHEDULER_KEYS = frozenset(f.name for f in fields(LRSchedulerConfig))
# Under manual optimization the method steps its schedulers itself: what says when a Trainer
# steps them is ignored, as a Trainer ignores it (with a warning).
MANUAL_IGNORED = frozenset({"reduce_on_plateau", "monitor", "strict"})


class ConfiguredOptimizersError(TypeError):
    """`configure_optimizers` returned something that is not one of the forms (`FORMS`)."""


def read_configured(
    configured: Any, automatic: bool, owner: str = "configure_optimizers"
) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    """(optimizers, scheduler configs) of `configured`, what `owner` (e.g.
    "PromptFL.configure_optimizers") returned, under automatic optimization or not.
    Raises ConfiguredOptimizersError naming `owner` and what it got for any other form."""
    optimizers, schedulers, monitor = _split(configured, owner)
    configs = [_config(s, monitor, automatic, owner) for s in schedulers]
    for config in configs:
        if getattr(config.scheduler, "optimizer", None) not in optimizers:
            raise ConfiguredOptimizersError(
                f"{owner} returned a {type(config.scheduler).__name__} whose optimizer is not among the optimizers it "
                "returned; build each scheduler over one of them"
            )
    return optimizers, configs


def _split(configured: Any, owner: str) -> tuple[list, list, str | None]:
    if isinstance(configured, torch.optim.Optimizer):
        return [configured], [], None
    if (
        isinstance(configured, (list, tuple))
        and len(configured) == 2
        and isinstance(configured[0], list)
        and all(isinstance(o, torch.optim.Optimizer) for o in configured[0])
    ):
        optimizers, schedulers = configured
        return list(optimizers), list(schedulers) if isinstance(schedulers, list) else [schedulers], None
    if isinstance(configured, dict):
        _check_keys(configured, owner)
        schedulers = [configured["lr_scheduler"]] if "lr_scheduler" in configured else []
        return [configured["optimizer"]], schedulers, configured.get("monitor")
    if isinstance(configured, (list, tuple)) and configured and all(isinstance(d, dict) for d in configured):
        for entry in configured:
            _check_keys(entry, owner)
        schedulers = [
            dict(d["lr_scheduler"]) if isinstance(d["lr_scheduler"], dict) else {"scheduler": d["lr_scheduler"]}
            for d in configured
            if "lr_scheduler" in d
        ]
        return [d["optimizer"] for d in configured], schedulers, None
    if isinstance(configured, (list, tuple)) and all(isinstance(o, torch.optim.Optimizer) for o in configured):
        return list(configured), [], None
    raise ConfiguredOptimizersError(f"{owner} returned {_shown(configured)}; return one of: {FORMS}")


def _check_keys(entry: dict, owner: str) -> None:
    unknown = sorted(set(entry) - {"optimizer", "lr_scheduler", "monitor"})
    if unknown or not isinstance(entry.get("optimizer"), torch.optim.Optimizer):
        what = f"the unknown keys {unknown}" if unknown else f'"optimizer": {_shown(entry.get("optimizer"))}'
        raise ConfiguredOptimizersError(
            f'{owner} returned a dict with {what}; it takes "optimizer" (a torch optimizer) and optionally '
            '"lr_scheduler" and "monitor"'
        )


def _config(scheduler: Any, monitor: str | None, automatic: bool, owner: str) -> LRSchedulerConfig:
    if not isinstance(scheduler, dict):
        plateau = automatic and isinstance(scheduler, ReduceLROnPlateau)
        return LRSchedulerConfig(scheduler, reduce_on_plateau=plateau, monitor=monitor if plateau else None)
    unknown = sorted(set(scheduler) - SCHEDULER_KEYS)
    if unknown or "scheduler" not in scheduler:
        problem = f"the unknown keys {unknown}" if unknown else 'no "scheduler"'
        raise ConfiguredOptimizersError(
            f'{owner} returned a scheduler dict with {problem}; it takes {sorted(SCHEDULER_KEYS)}, "scheduler" required'
        )
    if not automatic:
        return LRSchedulerConfig(**{k: v for k, v in scheduler.items() if k not in MANUAL_IGNORED})
    if scheduler.get("interval", "epoch") not in ("step", "epoch"):
        raise ConfiguredOptimizersError(
            f'{owner} returned a scheduler with "interval": {scheduler["interval"]!r}; it is "step" or "epoch"'
        )
    entry = {"reduce_on_plateau": isinstance(scheduler["scheduler"], ReduceLROnPlateau), **scheduler}
    if isinstance(entry["scheduler"], OneCycleLR) and entry.get("interval", "epoch") == "epoch":
        warnings.warn(  # Lightning's warning, in its words
            "A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean 'interval': 'step'?",
            RuntimeWarning,
            stacklevel=3,
        )
    return LRSchedulerConfig(**entry)


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {', '.join(type(v).__name__ for v in value) or 'nothing'}"
    return type(value).__name__ if value is not None else "None"
