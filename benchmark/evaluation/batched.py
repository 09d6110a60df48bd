"""Every client's model on a test batch in one pass.

In evaluation every client's personalized model scores the same test images over the same
classes (Base, Novel) or its own (Local). Client by client that is K small passes, whose
cost on a CPU or a large GPU is per-operation overhead more than arithmetic. Here the
clients' states are stacked along a leading dimension and `torch.func.vmap` runs the
method's own `encode_classes`, `image_features` and `classify` once for all of them
(`functional_call` swaps the stacked state in): the same code, each operation K times wider.

Not bit-identical to scoring client by client (a batched matrix product may sum in
another order), so it is a run setting in a cell's identity (`RunConfig.batched_evaluation`,
`--batched-evaluation true`). Off by default: on a 2-core CPU the wider passes were slower
than client by client for pFedMMA and PromptFL and faster for LoRA (`fedbench bench`,
results/perf.md); where per-operation overhead dominates (small batches on a large GPU)
is where it is meant to pay. A method that cannot be vmapped (data-dependent Python on
tensor values, in-place writes to its state, tensors kept on `self` in a forward) sets
`batched_evaluation = False`; one that fails or disagrees in the probe a run does on its
first evaluation is scored client by client with a warning naming why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, vmap
from torchmetrics import Metric

from benchmark import flops
from benchmark.evaluation.inputs import input_batches, targets
from benchmark.evaluation.metrics import ACCURACY, computed, empty, request_metrics
from benchmark.federation.features import FeatureCache
from benchmark.federation.stacked import (
    BatchingProbe,
    batchable_attention,
    comparable_kernels,
    relative_difference,
    stack_states,
)
from benchmark.method import FederatedMethod, State
from data.base import LabeledImages

# States scored in one pass: activations take this many times those of one client's pass.
MAX_CLIENTS_PER_PASS = 8
# The probe: batched logits must equal client-by-client ones to this relative tolerance.
PROBE_RTOL = 1e-5


class _Calls(nn.Module):
    """Runs `fn(method, *args)` as its forward, so that `functional_call` can swap the
    method's state for one client's (a slice of the stacked states under vmap)."""

    def __init__(self, method: FederatedMethod) -> None:
        super().__init__()
        self.method = method

    def forward(self, fn: Callable, *args: Any) -> Any:
        return fn(self.method, *args)


@dataclass(frozen=True)
class _Classes:
    """Class features of K states: `rebuild(tensors)` is one state's `encode_classes` output
    from its slices of `tensors` (each stacked along a leading K)."""

    rebuild: Callable[[list], Any]
    tensors: tuple


def _split(obj: Any) -> tuple[list, Callable[[list], Any]]:
    """The tensors inside `obj` (tensors, tuples, lists, dicts, dataclasses of them) and a
    function putting other tensors in their places; what is not a tensor is kept as is."""
    if isinstance(obj, torch.Tensor):
        return [obj], lambda ts: ts[0]
    if isinstance(obj, (tuple, list, dict)) or dataclasses.is_dataclass(obj):
        if isinstance(obj, dict):
            keys, values = list(obj), list(obj.values())
        elif isinstance(obj, (tuple, list)):
            keys, values = None, list(obj)
        else:
            keys = [f.name for f in dataclasses.fields(obj)]
            values = [getattr(obj, k) for k in keys]
        parts = [_split(v) for v in values]
        tensors = [t for found, _ in parts for t in found]

        def rebuild(ts: list) -> Any:
            out, at = [], 0
            for found, inner in parts:
                out.append(inner(ts[at : at + len(found)]))
                at += len(found)
            if isinstance(obj, dict):
                return dict(zip(keys, out))
            if isinstance(obj, (tuple, list)):
                return type(obj)(out)
            return dataclasses.replace(obj, **dict(zip(keys, out)))

        return tensors, rebuild
    return [], lambda ts: obj


def _as_calls_state(stacked: State) -> State:
    """`stacked` named as `_Calls` holds the method's state (under `method.`)."""
    return {f"method.{k}": v for k, v in stacked.items()}


class BatchedScorer:
    """Scores K client states of `method` at once: `measures(states, indices, class_ids)`
    returns each state's top-1 accuracy (%) and extra metrics, as
    `benchmark.evaluation.accuracy.measure` would for each state loaded in turn."""

    def __init__(
        self,
        method: FederatedMethod,
        split: LabeledImages,
        cache: FeatureCache | None,
        batch_size: int = 256,
        num_workers: int = 0,
    ) -> None:
        self.method = method
        self.split = split
        self.cache = cache
        self.batch_size = batch_size
        self.num_workers = num_workers
        self._calls = _Calls(method)

    @torch.no_grad()
    def class_features(self, stacked: State, class_ids: Sequence[int]) -> "_Classes":
        """Each state's `encode_classes` of classes `class_ids`: its tensors stacked, what is
        not a tensor (FedCoCoOp's class names) kept once."""
        names = [self.split.class_names[c] for c in class_ids]
        self.method.eval()
        rebuilds: list[Callable] = []  # set while vmap traces `one`

        def one(state: State) -> Any:
            out = functional_call(self._calls, state, (lambda m: m.encode_classes(names),), strict=False)
            tensors, rebuild = _split(out)
            rebuilds[:] = [rebuild]
            return tuple(tensors) if tensors else torch.zeros(())  # vmap needs a tensor out

        with batchable_attention():
            out = vmap(one)(_as_calls_state(stacked))
        return _Classes(rebuilds[0], out if isinstance(out, tuple) else ())

    @torch.no_grad()
    def logits(self, stacked: State, inputs: Any, classes: "_Classes") -> torch.Tensor:
        """[K, B, C]: each state's logits for a batch of inputs (images, cached features or
        an image prefix), shared by all states."""
        self.method.eval()

        def one(state: State, tensors: tuple) -> torch.Tensor:
            own = classes.rebuild(list(tensors))
            return functional_call(
                self._calls, state, (lambda m: m.classify(m.image_features(inputs), own),), strict=False
            )

        with batchable_attention():
            return vmap(one)(_as_calls_state(stacked), classes.tensors)

    def accuracies(self, states: Sequence[State], indices: Sequence[int], class_ids: Sequence[int]) -> list[float]:
        return [values[ACCURACY] for values in self.measures(states, indices, class_ids)]

    @torch.no_grad()
    def measures(
        self,
        states: Sequence[State],
        indices: Sequence[int],
        class_ids: Sequence[int],
        extra: Mapping[str, Callable[[int], Metric]] | None = None,
    ) -> list[dict[str, float]]:
        """Each state's `benchmark.evaluation.accuracy.measure`: its accuracy and `extra` metrics."""
        extra = extra or {}
        indices = list(indices)
        if not indices:
            return [empty(extra) for _ in states]
        wanted = targets(self.split, indices, class_ids).to(self.method.device)
        stacked = stack_states(states)
        with flops.charge("evaluation"):
            classes = self.class_features(stacked, class_ids)
        metrics = [request_metrics(len(class_ids), extra, self.method.device) for _ in states]
        for inputs, start in self.batches(indices):
            with flops.charge("evaluation"):
                logits = self.logits(stacked, inputs, classes)
            for k, state_metrics in enumerate(metrics):
                state_metrics.update(logits[k], wanted[start : start + logits.shape[1]])
        return [computed(m) for m in metrics]

    def batches(self, indices: list[int]) -> Iterator[tuple[Any, int]]:
        return input_batches(self.method, self.split, indices, self.cache, self.batch_size, self.num_workers)


def probe(
    scorer: BatchedScorer, states: Sequence[State], indices: Sequence[int], class_ids: Sequence[int]
) -> str | None:
    """Why batched scoring cannot stand in for client-by-client scoring of this method
    (an error, or logits differing beyond PROBE_RTOL on one batch, 4 unit roundoffs of the half
    type under a mixed-precision autocast), or None when it can."""
    method = scorer.method
    saved = method.client_state()
    rtol = PROBE_RTOL
    device_type = method.device.type
    if torch.is_autocast_enabled(device_type):  # logits of bf16 products: bf16's rounding, not fp32's
        rtol = max(rtol, 4 * torch.finfo(torch.get_autocast_dtype(device_type)).eps / 2)
    indices = list(indices)[: min(8, scorer.batch_size)]
    try:
        stacked = stack_states(states)
        inputs, _ = next(scorer.batches(indices))
        with torch.no_grad(), comparable_kernels():  # both sides on the same kernels
            batched = scorer.logits(stacked, inputs, scorer.class_features(stacked, class_ids))
            names = [scorer.split.class_names[c] for c in class_ids]
            for k, state in enumerate(states):
                method.load_client_state(state)
                method.eval()
                alone = method.logits(inputs, names)
                difference = relative_difference(batched[k], alone, rtol)
                if difference is not None:
                    return f"batched logits differ from client-by-client ones by {difference:.1e} (relative)"
    finally:  # an error (vmap refuses what it cannot batch) is BatchingProbe's to report
        method.load_client_state(saved)
    return None


def evaluation_probe(method: FederatedMethod) -> BatchingProbe:
    """Batched evaluation's probe-then-fall-back (`benchmark.federation.stacked.BatchingProbe`)."""
    return BatchingProbe(
        method, "are evaluated one by one", "; set batched_evaluation = False on the class to skip this check"
    )
