"""What a request is scored with: torchmetrics `Metric`s, updated with each evaluation batch's
logits and targets on the method's device and computed once per request (update / compute,
one fresh set per request: nothing carries from one client's model to the next).

Every protocol's score is top-1 accuracy (%), `TopOneAccuracy`: counts of correct and seen
images, exact integers, divided once in float64 as the suite always divided them, so Local,
Base, Novel and every table number are what they were before torchmetrics scored them.

A run adds metrics with `--metrics` (`RunConfig.metrics`, names joined by ','): a name of
`EXTRA_METRICS` or a torchmetrics class path (`torchmetrics.classification.MulticlassF1Score`)
whose class takes `num_classes`. Each is scored on every request beside the accuracy, over
the request's classes, and goes under `<request>/<name>` ("Local/macro_accuracy", in
torchmetrics' own scale): per client in metrics.csv and W&B's per-client table, and as the
unweighted mean over clients in summary.json's metrics and W&B's history, where the
protocol's summary leaves off (`summarize`). The protocol's own metrics never see them.
"""

from __future__ import annotations

import importlib
import math
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection
from torchmetrics.classification import MulticlassAccuracy, MulticlassCalibrationError

from benchmark.errors import ConfigError
from benchmark.evaluation.protocols.helpers import nanmean

ACCURACY = "accuracy"  # the key of every request's top-1 accuracy, the protocol's score
SEPARATOR = "/"  # "<request>/<metric>": an extra metric's name in a client's metrics


class TopOneAccuracy(Metric):
    """Top-1 accuracy (%): correct and seen images counted on the device (no host read per
    batch), then 100 * correct / seen in float64, as the suite's tables were computed."""

    full_state_update = False
    higher_is_better = True
    is_differentiable = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("correct", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("seen", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, logits: Tensor, target: Tensor) -> None:
        self.correct += (logits.argmax(-1) == target).sum()
        self.seen += target.numel()

    def compute(self) -> Tensor:
        return 100.0 * self.correct.double() / self.seen


# Names `--metrics` takes, each a metric from the number of classes scored over. Add to it
# (before the run builds its evaluator) to give a metric of your own a name.
EXTRA_METRICS: dict[str, Callable[[int], Metric]] = {
    # the mean over classes of each class's recall (%-free: torchmetrics' 0..1)
    "macro_accuracy": lambda n: MulticlassAccuracy(num_classes=n, average="macro", validate_args=False),
    # expected calibration error of the softmax confidences (15 bins, L1)
    "calibration_error": lambda n: MulticlassCalibrationError(num_classes=n, validate_args=False),
}


def metric_names(spec: str) -> list[str]:
    """'a,b' -> ['a', 'b'] (RunConfig.metrics; '' -> [])."""
    return [part.strip() for part in spec.split(",")] if spec.strip() else []


def extra_metrics(spec: str) -> dict[str, Callable[[int], Metric]]:
    """The metrics `spec` (RunConfig.metrics) names, by the name their values go under: a
    name of EXTRA_METRICS, or a class path (its class name, lower case); ConfigError else."""
    found: dict[str, Callable[[int], Metric]] = {}
    for name in metric_names(spec):
        if name == ACCURACY:
            raise ConfigError(f"metrics: {ACCURACY!r} is every run's score already")
        if name in EXTRA_METRICS:
            found[name] = EXTRA_METRICS[name]
        elif "." in name:
            found[name.rsplit(".", 1)[1].lower()] = _metric_class(name)
        else:
            raise ConfigError(
                f"metrics: {name!r} is no metric; name one of {', '.join(EXTRA_METRICS)} or a torchmetrics "
                "class path taking num_classes, e.g. torchmetrics.classification.MulticlassF1Score"
            )
    return found


def _metric_class(path: str) -> Callable[[int], Metric]:
    module, name = path.rsplit(".", 1)
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"metrics: {path!r} cannot be imported ({exc})") from None
    if not (isinstance(cls, type) and issubclass(cls, Metric)):
        raise ConfigError(f"metrics: {path!r} is not a torchmetrics Metric class")
    return lambda n: cls(num_classes=n)


def request_metrics(num_classes: int, extra: Mapping[str, Callable[[int], Metric]], device: Any) -> MetricCollection:
    """A fresh set for one request over `num_classes` classes: the accuracy, then `extra`."""
    metrics = {ACCURACY: TopOneAccuracy(), **{name: make(num_classes) for name, make in extra.items()}}
    # compute_groups off: finding the groups compares states after the first update (a host read)
    return MetricCollection(metrics, compute_groups=False).to(device)


def computed(metrics: MetricCollection) -> dict[str, float]:
    """The collection's values as floats (the one host read of a request)."""
    return {name: float(value) for name, value in metrics.compute().items()}


def empty(extra: Mapping[str, Any]) -> dict[str, float]:
    """What a request without images scores: NaN (its client's test shard is empty)."""
    return {ACCURACY: math.nan, **{name: math.nan for name in extra}}


def client_extras(measured: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """A client's extra metrics, `<request>/<metric>`, from its requests' measurements."""
    return {
        f"{request}{SEPARATOR}{m}": v
        for request, values in measured.items()
        for m, v in values.items()
        if m != ACCURACY
    }


def is_extra(name: str, extras: Sequence[str]) -> bool:
    return SEPARATOR in name and name.rsplit(SEPARATOR, 1)[1] in extras


def protocol_metrics(
    per_client: Mapping[int, Mapping[str, float]], extras: Sequence[str]
) -> dict[int, dict[str, float]]:
    """`per_client` without the extra metrics: what the protocol made."""
    if not extras:
        return {cid: dict(m) for cid, m in per_client.items()}
    return {cid: {k: v for k, v in m.items() if not is_extra(k, extras)} for cid, m in per_client.items()}


def summarize(
    protocol, per_client: Mapping[int, Mapping[str, float]], partition, extras: Sequence[str] = ()
) -> dict[str, float]:
    """The protocol's summary of its metrics, then each extra metric's mean over the clients
    that have it (NaN ones, empty test shards, left out)."""
    summary = protocol.summarize(protocol_metrics(per_client, extras), partition)
    names = dict.fromkeys(k for m in per_client.values() for k in m if is_extra(k, extras))
    for name in names:
        summary[name] = nanmean(m[name] for m in per_client.values() if name in m)
    return summary
