"""Accuracy of a client's personalized model over a class set: the one function that
Local, Base, Novel and every protocol's metric go through. A protocol states what it needs
as `Request`s (test images, classes); the `Evaluator` scores them, one client at a time or
many clients' states in one batched pass, with torchmetrics metrics (top-1 accuracy, and
the run's `--metrics`: `benchmark.evaluation.metrics`)."""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import Tensor
from torchmetrics import Metric, MetricCollection

from benchmark import flops
from benchmark.evaluation.batched import MAX_CLIENTS_PER_PASS, BatchedScorer, evaluation_probe, probe
from benchmark.evaluation.inputs import input_batches, targets
from benchmark.evaluation.metrics import ACCURACY, computed, empty, extra_metrics, request_metrics
from benchmark.evaluation.requests import Requests
from benchmark.federation.features import FeatureCache
from benchmark.method import FederatedMethod, State
from data.base import LabeledImages

AccuracyFn = Callable[[Sequence[int], Sequence[int]], float]  # (test indices, class ids) -> %
# (test indices, class ids) -> {metric: value}: the accuracy (%) under ACCURACY, the extra metrics
MeasureFn = Callable[[Sequence[int], Sequence[int]], dict[str, float]]


class Evaluator:
    """Evaluates the method's *current* state on a test split.

    Results are memoized by (state fingerprint, indices, classes): global methods, whose
    clients share one state, pay for Base and Novel once instead of once per client. The
    loaded state's class features are kept per class set, so two metrics over the same
    classes (Local and Base both classify over all base classes) encode them once.

    With `batched`, `score_together` fills the memo for many states at once (one vmapped
    pass per image batch, `benchmark.evaluation.batched`) where the method allows it.
    `metrics`: the run's extra torchmetrics metrics (`RunConfig.metrics`), scored beside the
    accuracy on every request (`measure`).
    """

    def __init__(
        self,
        method: FederatedMethod,
        test: LabeledImages,
        cache: FeatureCache | None,
        batch_size: int = 256,
        num_workers: int = 0,
        batched: bool = False,
        metrics: str = "",
    ) -> None:
        self.method = method
        self.extra = extra_metrics(metrics)  # refused here, before any round, when a name is unknown
        self.test = test
        self.cache = cache
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.scorer = None
        if batched and method.batched_evaluation and method.state_dict():  # no state: one model for all
            self.scorer = BatchedScorer(method, test, cache, batch_size, num_workers)
        self._batching = evaluation_probe(method)
        self._memo: dict[tuple, dict[str, float]] = {}
        self._classes: dict[tuple, Any] = {}  # (fingerprint, class ids) -> class features, loaded state only

    def load(self, state: State) -> AccuracyFn:
        """The accuracy (%) of the model with `state` loaded, as a function of (test
        indices, class ids)."""
        measure = self.load_measures(state)
        return lambda indices, class_ids: measure(indices, class_ids)[ACCURACY]

    def load_measures(self, state: State) -> MeasureFn:
        """`load`, with every metric of a request: {ACCURACY: %, extra metric: value}."""
        self.method.load_client_state(state)
        fingerprint = _fingerprint(state)
        self._classes = {k: v for k, v in self._classes.items() if k[0] == fingerprint}
        return lambda indices, class_ids: self._measure(fingerprint, indices, class_ids)

    def measure(self, state: State, requests: Requests) -> dict[str, dict[str, float]]:
        """Each request's metrics ({ACCURACY: %, extra metric: value}), of the model with
        `state` loaded (memoized: a request `score_together` answered already costs nothing)."""
        measure = self.load_measures(state)
        return {name: dict(measure(r.indices, r.class_ids)) for name, r in requests.items()}

    def score(self, state: State, requests: Requests) -> dict[str, float]:
        """The accuracy (%) each request asks for (`measure`'s ACCURACY)."""
        return {name: values[ACCURACY] for name, values in self.measure(state, requests).items()}

    def score_together(self, wanted: Sequence[tuple[State, Requests]]) -> None:
        """Memoize what `wanted` ((a client's state, its requests), ...) asks for, the states
        whose requests share images and classes in one batched pass (at most
        `MAX_CLIENTS_PER_PASS` at once); `score` then reads the memo. Nothing when batching
        is off or not possible for this method; the first call probes it
        (`benchmark.evaluation.batched.probe`)."""
        if self.scorer is None:
            return
        groups: dict[tuple, dict[str, State]] = {}
        for state, requests in wanted:
            fingerprint = _fingerprint(state)
            for r in requests.values():
                key = (r.indices, r.class_ids)
                if (fingerprint, *key) not in self._memo:
                    groups.setdefault(key, {})[fingerprint] = state
        for (indices, class_ids), states in groups.items():
            if len(states) < 2 or not indices:
                continue  # nothing to batch: `load` scores it
            domain = scored_domain(self.test, indices) if self.method.uses_class_attributes else None
            self.method.scored_domain = domain
            try:
                if not self._batching.allows(lambda: probe(self.scorer, list(states.values())[:2], indices, class_ids)):
                    self.scorer = None
                    return
                distinct = list(states)
                for start in range(0, len(distinct), MAX_CLIENTS_PER_PASS):
                    part = distinct[start : start + MAX_CLIENTS_PER_PASS]
                    scores = self.scorer.measures([states[f] for f in part], indices, class_ids, self.extra)
                    self._memo.update({(f, indices, class_ids): s for f, s in zip(part, scores)})
            finally:
                self.method.scored_domain = None

    def _measure(self, fingerprint: str, indices: Sequence[int], class_ids: Sequence[int]) -> dict[str, float]:
        key = (fingerprint, tuple(indices), tuple(class_ids))
        if key not in self._memo:
            # Class attributes may read differently per domain (FedMVP's sentence frames):
            # such a method's class features are per scored domain.
            domain = scored_domain(self.test, indices) if self.method.uses_class_attributes else None
            classes = (fingerprint, tuple(class_ids), domain)
            self.method.scored_domain = domain
            try:
                if classes not in self._classes:
                    with flops.charge("evaluation"):
                        self._classes[classes] = class_features(self.method, self.test, class_ids)
                self._memo[key] = measure(
                    self.method,
                    self.test,
                    indices,
                    class_ids,
                    self.cache,
                    self.batch_size,
                    self.num_workers,
                    self._classes[classes],
                    self.extra,
                )
            finally:
                self.method.scored_domain = None
        return self._memo[key]


def scored_domain(split: LabeledImages, indices: Sequence[int]) -> str | None:
    """The one domain images `indices` of `split` come from; None when the split has no
    per-image domains or the images span several."""
    if split.domains is None:
        return None
    found = {split.domains[i] for i in indices}
    return found.pop() if len(found) == 1 else None


@torch.no_grad()
def class_features(method: FederatedMethod, split: LabeledImages, class_ids: Sequence[int]) -> Any:
    """`encode_classes` of classes `class_ids` of `split`, in evaluation mode."""
    method.eval()
    return method.encode_classes([split.class_names[c] for c in class_ids])


@torch.no_grad()
def accuracy(
    method: FederatedMethod,
    split: LabeledImages,
    indices: Sequence[int],
    class_ids: Sequence[int],
    cache: FeatureCache | None = None,
    batch_size: int = 256,
    num_workers: int = 0,
    classes: Any = None,
) -> float:
    """Top-1 accuracy (%) of `method` on images `indices` of `split`, classifying over
    `class_ids` only (the images' labels must be among them): `measure`'s ACCURACY."""
    return measure(method, split, indices, class_ids, cache, batch_size, num_workers, classes)[ACCURACY]


@torch.no_grad()
def measure(
    method: FederatedMethod,
    split: LabeledImages,
    indices: Sequence[int],
    class_ids: Sequence[int],
    cache: FeatureCache | None = None,
    batch_size: int = 256,
    num_workers: int = 0,
    classes: Any = None,
    extra: Mapping[str, Callable[[int], Metric]] | None = None,
) -> dict[str, float]:
    """Top-1 accuracy (%, under ACCURACY) and the `extra` metrics (name -> a metric from the
    class count: `benchmark.evaluation.metrics.extra_metrics`) of `method` on images
    `indices` of `split`, classifying over `class_ids` only (the images' labels must be
    among them). With a `cache`, frozen work on the images is done once per image for every
    client: all of it for `frozen_image_features` methods, the first `frozen_image_blocks`
    image blocks for others (under shortcuts). `classes`: `class_features(method, split,
    class_ids)` when the caller has them already."""
    extra = extra or {}
    indices = list(indices)
    if not indices:
        return empty(extra)
    wanted = targets(split, indices, class_ids)
    method.eval()
    if classes is None:
        classes = class_features(method, split, class_ids)
    # Updated on the device and read once: a read per batch would wait for the GPU each time.
    wanted = wanted.to(method.device)
    metrics = request_metrics(len(class_ids), extra, method.device)
    kind_of = flops.evaluation_kinds(method, classes)
    for inputs, start in input_batches(method, split, indices, cache, batch_size, num_workers):
        score_batch(method, inputs, classes, wanted[start : start + len(inputs)], kind_of(inputs), metrics)
    return computed(metrics)


def score_batch(
    method: FederatedMethod, inputs: Any, classes: Any, wanted: Tensor, kind: Any, metrics: MetricCollection
) -> None:
    """Update `metrics` with one evaluation batch's logits against `wanted` (a device tensor:
    no host read); the batch's FLOPs charged as of `kind` (`flops.charge_kind`)."""
    with flops.charge_kind("evaluation", kind):
        logits = method.classify(method.image_features(inputs), classes)
    metrics.update(logits, wanted)


def _fingerprint(state: State) -> str:
    digest = hashlib.sha1()
    for key in sorted(state):
        digest.update(key.encode())
        digest.update(state[key].detach().cpu().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
