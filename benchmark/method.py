"""The method contract: what a federated fine-tuning method computes and what it shares.

A method is a LightningModule. It says *what* to compute (features, logits, a training
step, optimizers) and *which* of its state travels (uploaded to the server, downloaded
from it, kept personal). The simulator in `benchmark.federation.simulator` says *when*: it never
computes a loss, and a method never loops over clients or rounds.

Client state is the method's `state_dict()` -- plain name -> tensor dicts, never hidden
attributes -- so the simulator can swap clients in and out of one resident module,
checkpoint them and move them between processes. The frozen backbone is *not* a
submodule: it is shared by every client and never enters a client's state.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmark.backbone import Backbone, BackboneShape, ImagePrefix, full_precision
from benchmark.hyperparameters import OPTIMIZER_RANGES, Range  # noqa: F401  (methods import them from here)

if TYPE_CHECKING:
    from data.attributes import ClassAttributes

State = dict[str, Tensor]


@dataclass(frozen=True)
class _FloatRange:
    low: float
    high: float
    log: ClassVar[bool] = False

    def suggest(self, trial, name: str) -> float:
        return trial.suggest_float(name, self.low, self.high, log=self.log)

    def contains(self, value: Any) -> bool:
        return isinstance(value, (int, float)) and self.low <= value <= self.high

    def check(self) -> str | None:
        ok = 0 < self.low < self.high if self.log else self.low < self.high
        return None if ok else f"needs {'0 < ' if self.log else ''}low < high, got [{self.low}, {self.high}]"


@dataclass(frozen=True)
class LogUniform(_FloatRange):
    """A tunable float searched log-uniformly in [low, high] (learning rates)."""

    log: ClassVar[bool] = True

    @classmethod
    def around(cls, default: float, down: float = 10.0, up: float = 30.0) -> "LogUniform":
        """[default / down, default * up]: the built-in methods' learning-rate range. Wider
        above than below because benchmark schedules (the toy world's 40 local steps) are
        often far shorter than the papers' the defaults were chosen for."""
        return cls(default / down, default * up)


@dataclass(frozen=True)
class Uniform(_FloatRange):
    """A tunable float searched uniformly in [low, high]."""


@dataclass(frozen=True)
class Choice:
    """A tunable hyperparameter taking one of `values`."""

    values: tuple[Any, ...]

    def suggest(self, trial, name: str) -> Any:
        return trial.suggest_categorical(name, list(self.values))

    def contains(self, value: Any) -> bool:
        return value in self.values

    def check(self) -> str | None:
        return None if len(self.values) >= 1 else "needs at least one value"


SearchSpace = LogUniform | Uniform | Choice


@dataclass(frozen=True)
class ClientContext:
    """Who is training now: set by the simulator before each client's local training."""

    client_id: int
    round: int
    class_names: tuple[str, ...]  # the client's label space: label i is class_names[i]
    num_samples: int
    rounds: int = 0  # the federation's length, for schedules that span rounds (0: unknown)
    # Rounds this client trained in before this one (0 in its first), from the federation's
    # fixed client schedule: the position of a per-client schedule over rounds
    # (`benchmark.optim.sgd_per_client_cosine`), the same wherever the client-round runs.
    participations: int = 0
    # The client's group in the partition: its domain on a multi-domain dataset (msst: a
    # source domain), the dataset's name in a federation over several, else None.
    domain: str | None = None


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sent to the server after local training."""

    client_id: int
    num_samples: int
    state: State
    # The server's weight for this client, set by the run's `aggregation` setting:
    # n_i ("samples") or 1 ("uniform"); None means n_i.
    weight: float | None = None

    @property
    def aggregation_weight(self) -> float:
        return float(self.num_samples if self.weight is None else self.weight)


class Capabilities:
    """The performance opt-ins (`CAPABILITIES`), optional: a method that sets none of them is
    correct, only slower. Each is a promise about the method's computation that lets a run
    cache, share or batch work; `CAPABILITIES` says what each promises, and a run checks the
    batching ones (a probe, then a fallback with a warning)."""

    frozen_image_features: ClassVar[bool] = False
    image_feature_kind: ClassVar[str] = "clip"
    frozen_image_blocks: int = 0
    batched_evaluation: ClassVar[bool] = True
    batched_training: ClassVar[bool] = False
    gpu_precision: ClassVar[str] = "bf16-mixed"

    def class_inputs(self, class_lists: Sequence[Sequence[str]]) -> tuple[Tensor, ...]:
        """Runs only for `batched_training`, once per round with its clients' class lists.
        Returns what `encode_class_inputs` needs of each list, from frozen parts alone, each
        tensor stacked along a leading dimension (one row per list; lists of different
        lengths raise ValueError). Default: raises (encode_classes is not split)."""
        raise NotImplementedError(f"method {self.name!r} does not split encode_classes (batched_training)")

    def encode_class_inputs(self, inputs: tuple[Tensor, ...]) -> Any:
        """Runs only for `batched_training`, under `torch.func.vmap`, with one class list's row
        of `class_inputs`. Returns that list's `encode_classes` output; `encode_classes(names)`
        is then `encode_class_inputs(first(class_inputs([names])))`. Default: raises
        (encode_classes is not split)."""
        raise NotImplementedError(f"method {self.name!r} does not split encode_classes (batched_training)")


class FederatedMethod(Capabilities, L.LightningModule):
    """Base class of every method: the contract `CORE` and `OPTIONAL` declare, with the
    performance opt-ins of `Capabilities` apart. Override what your method changes; each
    hook's docstring says when it runs, what it returns and its default
    (`fedbench methods --describe NAME` shows which a method overrides;
    docs/writing-a-method.md walks through a complete one).

    Construction: `__init__(self, backbone, <hyperparameters>)`. Every argument after
    `backbone` is a hyperparameter: typed, with the paper's default, exposed as a CLI flag
    and a YAML key; `ranges` and `Literal` annotations are the only checks of its value
    (before anything is built), so `__init__` does not repeat them. Call
    `self.save_hyperparameters(ignore=["backbone"])`; trainable state is `nn.Parameter`s /
    submodules of the method (never of the shared backbone).

    Computation: training and every metric (Local, Base, Novel) go through
    `logits(images, class_names) = classify(image_features(images), encode_classes(class_names))`,
    so no method can special-case a metric. Federation: plain name -> tensor dicts over
    `state_dict()` keys; what `upload_keys` matches is uploaded, `aggregate` combines the
    uploads on the server, `download` says what each client receives, and everything not
    downloaded stays personal.
    """

    name: ClassVar[str] = ""  # set by @register_method
    # Core (CORE); the capabilities' attributes are on `Capabilities`.
    upload_keys: ClassVar[tuple[str, ...]] = ()
    # Optional settings (OPTIONAL).
    ranges: ClassVar[Mapping[str, Range]] = {}
    tunable: ClassVar[Mapping[str, SearchSpace]] = {}
    lr_schedule: ClassVar[str] = ""
    evaluate_after_download: ClassVar[bool] = True
    uses_class_attributes: ClassVar[bool] = False

    def __init__(self, backbone: Backbone) -> None:
        super().__init__()
        # Not a submodule: one frozen copy for all clients, excluded from client state.
        object.__setattr__(self, "_backbone", backbone)
        self.client: ClientContext | None = None
        self.class_attributes: ClassAttributes | None = None
        self.scored_domain: str | None = None  # set by evaluation: see `images_domain`

    @property
    def backbone(self) -> Backbone:
        return self._backbone

    @classmethod
    def fit_to_backbone(cls, shape: BackboneShape | Backbone, hyperparameters: dict[str, Any]) -> dict[str, Any]:
        """Runs before anything is built or downloaded, with the backbone's shape
        (`shape.name`, `shape.text.blocks`, `shape.text.width`, `shape.vision...`: read from
        its config) and every hyperparameter (defaults filled in, types and ranges checked),
        and once more with the built backbone. Returns the hyperparameters with any value
        relative to the backbone resolved (they are what the run records and hashes); raises
        ValueError naming the hyperparameter when they cannot fit the backbone.
        Default: returns them unchanged."""
        return hyperparameters

    # -- data ---------------------------------------------------------------------------
    def set_class_attributes(self, attributes: ClassAttributes) -> None:
        """Runs once before training, only for methods with `uses_class_attributes = True`, with
        the descriptors of every class of the run's dataset (`attributes.of(class_names)`) and
        its sentence frames (`attributes.frame_for(self.images_domain)`: per domain on a
        multi-domain dataset, else the dataset's). Returns nothing. Default: keeps them as
        `self.class_attributes`."""
        self.class_attributes = attributes

    # -- computation --------------------------------------------------------------------
    def encode_images(self, images: Tensor) -> Tensor:
        """Runs on every image batch (training and evaluation) unless cached features are
        passed instead (`frozen_image_features`). Returns image features, [B, D] or whatever
        `classify` expects. Default: the frozen CLIP image feature, L2-normalized."""
        return F.normalize(self.backbone.encode_image(images), dim=-1)

    def encode_classes(self, class_names: Sequence[str]) -> Any:
        """Runs once per batch in training and once per class set in evaluation (Local, Base,
        Novel). Returns whatever `classify` needs about the classes, e.g. text features [C, D].
        Default: zero-shot text features of "a photo of a {name}.", L2-normalized."""
        return F.normalize(self.backbone.zero_shot_text_features(class_names), dim=-1)

    def classify(self, image_features: Tensor, class_features: Any) -> Tensor:
        """Runs after the two encoders. Returns logits [B, C], column c for class_names[c].
        Default: CLIP's logit scale * cosine similarity (features are already normalized),
        in fp32 under any autocast."""
        with full_precision(image_features.device.type):
            return self.backbone.logit_scale * image_features.float() @ class_features.float().t()

    def logits(self, images: Tensor, class_names: Sequence[str]) -> Tensor:
        """Not a hook: `classify(image_features(images), encode_classes(class_names))`, the one
        path training and every metric take. Override the three parts instead."""
        return self.classify(self.image_features(images), self.encode_classes(class_names))

    def image_features(self, inputs: "Tensor | ImagePrefix") -> Tensor:
        """`encode_images` of a batch of images [B, 3, H, W] or of their frozen image prefix
        (`frozen_image_blocks`); a batch of precomputed features ([B, D], or [B, M, D] for
        patch features; frozen-feature cache, only for `frozen_image_features` methods)
        passes through."""
        if isinstance(inputs, ImagePrefix) or inputs.dim() == 4:
            return self.encode_images(inputs)
        return inputs

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        """Runs on each batch of the current client's local training (Lightning). `batch` is
        (images or cached features, labels indexing `current_client.class_names`). Returns the
        loss to minimize. Default: cross-entropy of `logits` over the client's classes."""
        images, labels = batch
        loss = F.cross_entropy(self.logits(images, self.current_client.class_names), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, batch_size=len(labels))
        return loss

    def configure_optimizers(self):
        """Runs at the start of every client-round (a fresh optimizer each time, so no momentum
        leaks between clients). Returns what Lightning accepts: an optimizer, or a dict with
        "optimizer" and "lr_scheduler" (`benchmark.optim`: `sgd_per_client_cosine` is the
        FedTPG harness's per-client cosine over rounds, `sgd_with_cosine` CoOp's cosine over
        the client-round's steps); say which in `lr_schedule`.
        Required as soon as the method has trainable parameters. Default: raises."""
        raise NotImplementedError(
            f"method {self.name!r} has trainable parameters but does not override configure_optimizers; "
            "return an optimizer over them, or freeze them (requires_grad=False)"
        )

    @property
    def trains(self) -> bool:
        """Whether local training does anything (zero-shot CLIP: no)."""
        return any(p.requires_grad for p in self.parameters())

    @property
    def current_client(self) -> ClientContext:
        if self.client is None:
            raise RuntimeError("no client is set: the simulator calls `set_client` before training")
        return self.client

    def set_client(self, client: ClientContext | None) -> None:
        self.client = client

    @property
    def images_domain(self) -> str | None:
        """The domain of the images at hand: in local training the client's
        (`current_client.domain`), in evaluation the scored images' (`scored_domain`, which
        the evaluator sets for methods with `uses_class_attributes`; None when the images
        span several domains or the dataset has none). FedMVP picks its sentence frame by it."""
        return self.client.domain if self.client is not None else self.scored_domain

    # -- state --------------------------------------------------------------------------
    def client_state(self) -> State:
        """A detached copy of everything a client owns (the method's whole state_dict)."""
        return {k: v.detach().clone() for k, v in self.state_dict().items()}

    def load_client_state(self, state: Mapping[str, Tensor]) -> None:
        """Load a full or partial client state; unknown keys are an error, not ignored."""
        own = self.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(f"method {self.name!r} has no state {unknown[:5]}; known: {sorted(own)[:10]}")
        with torch.no_grad():
            for key, value in state.items():
                own[key].copy_(value)
        self.on_client_state_loaded()

    def on_client_state_loaded(self) -> None:
        """Runs after `load_client_state` copied a state in, outside any step: the place to
        read on the host, once per state, a value a step would otherwise read (a sync per step
        on CUDA; pFedMoAP's expert count). Returns nothing. Default: does nothing."""

    def uploaded_state(self) -> State:
        return self.upload_of(self.client_state())

    def upload_of(self, state: State) -> State:
        """The part of a client `state` that is uploaded (`upload_keys`)."""
        return {k: v for k, v in state.items() if self.is_uploaded(k)}

    def is_uploaded(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.upload_keys)

    def parameter_counts(self) -> dict[str, int]:
        """Runs once per run (summary.json) and for `fedbench methods --describe`. Returns
        {"trainable_params": n, "uploaded_params": m} and any count of the method's own, which
        the summary records too (FedMVP: the parameters trained before and after its LoRA
        switch). Default: the trainable parameters and how many of them a client uploads each
        round (`upload_keys`)."""
        trainable = {n: p.numel() for n, p in self.named_parameters() if p.requires_grad}
        uploaded = sum(n for k, n in trainable.items() if self.is_uploaded(k))
        return {"trainable_params": sum(trainable.values()), "uploaded_params": uploaded}

    # -- server side --------------------------------------------------------------------
    def aggregate(self, updates: Sequence[ClientUpdate]) -> State:
        """Runs on the server after each round with the uploads (`upload_keys` of each client's
        state) of the clients that trained. Returns the aggregate state (name -> tensor); weigh
        clients by `update.aggregation_weight` to honour the run's `aggregation` setting.
        Default: FedAvg, weighted by each update's aggregation_weight (n_i, or 1 under uniform)."""
        return fedavg(updates)

    def download(self, client_id: int, aggregate: State, bank: Mapping[int, State]) -> State:
        """Runs for each client at the start of a round it takes part in, and once more after
        the last round before evaluation. `bank` maps client id -> its latest upload. Returns
        the (partial) state loaded into the client; keys not returned stay personal.
        It runs on the server (the Flower strategy calls it there), so it may read its
        arguments and the method's hyperparameters, never the module's current parameter
        values, which belong to whichever client was loaded last. Default: the aggregate."""
        return dict(aggregate)


def first(inputs: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """The first row of each of `class_inputs`' tensors: a lone class list's inputs."""
    return tuple(t[0] for t in inputs)


def fedavg(updates: Sequence[ClientUpdate]) -> State:
    """Weighted mean sum_i w_i / sum_j w_j * state_i, per key, in float64; w_i is each update's
    `aggregation_weight` (n_i by default: sample-weighted FedAvg; 1 under `aggregation: uniform`)."""
    if not updates:
        return {}
    weights = [u.aggregation_weight for u in updates]
    total = sum(weights)
    if total <= 0:
        raise ValueError("FedAvg over clients with no training samples")
    keys = updates[0].state.keys()
    averaged = {}
    for key in keys:
        acc = sum(u.state[key].double() * (w / total) for u, w in zip(updates, weights))
        averaged[key] = acc.to(updates[0].state[key].dtype)
    return averaged


def state_bytes(state: Mapping[str, Tensor]) -> int:
    """Bytes of the tensors actually sent."""
    return sum(t.numel() * t.element_size() for t in state.values())
