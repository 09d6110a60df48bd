"""Everything a run builds from its config before the first round (`prepare_run`): the seeded
method, the data, the partition, the federation's kind and its schedule. `fedbench run` and
the Flower apps (server and every node) build it with the same function, so every engine
starts equal (`benchmark.runs.engines`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from benchmark.backbone import Backbone, load_backbone
from benchmark.backbone_weights import check_weights_reachable
from benchmark.config import ConfigError, RunConfig
from benchmark.evaluation.accuracy import Evaluator
from benchmark.federation.features import FeatureCache, ViewFeatures
from benchmark.federation.round_loop import RoundHooks
from benchmark.federation.server import FederationPlan, Server
from benchmark.federation.servers import server_class
from benchmark.federation.servers.local import LocalServer
from benchmark.federation.simulator import FederatedSimulator, FederationSettings, client_sampling_schedule
from benchmark.method import FederatedMethod
from benchmark.protocol_registry import get_protocol
from benchmark.registry import build_method, get_method
from benchmark.runs.numerics import (
    apply_tf32,
    check_numerics,
    resolved_augment_backend,
    resolved_device,
    resolved_precision,
)
from benchmark.runs.prechecks import check_device, validate_run
from data.attributes import load_class_attributes
from data.base import DatasetSplits
from data.catalog import dataset_info, resolve_data_root
from data.combined import load_datasets
from data.decoded import DeviceImages
from data.partition import Partition
from data.transforms import clip_transforms
from data.validation import validation_view

# Frozen features survive across runs in one process (a sweep, the demo): same backbone,
# same split, same transform -> same features.
SHARED_FEATURES = FeatureCache()
# And the frozen features of augmented training views: the same views for every method of a cell's seed.
SHARED_VIEWS = ViewFeatures()


def resolve_device(config: RunConfig) -> tuple[str, str]:
    """(torch device, Lightning precision) for the config's `device` and `precision`."""
    device = resolved_device(config.device)
    # auto: the method says what it needs on a GPU (FederatedMethod.gpu_precision); the cell's
    # identity records the same resolution (benchmark.runs.numerics)
    precision = resolved_precision(config.method, device, config.precision)
    if precision == "auto":
        get_method(config.method)  # not installed here: its MethodError names the fix
    if precision == "16-mixed" and not device.startswith("cuda"):
        # Lightning would train in bf16 instead, while evaluation (autocast_context) ran in fp16.
        raise ConfigError(
            f"precision 16-mixed needs a CUDA device (device is {device!r}); on CPU use bf16-mixed or 32-true"
        )
    return device, precision


def autocast_context(device: str, precision: str) -> contextlib.AbstractContextManager:
    """The autocast Lightning's training step runs under for `precision`, entered around the
    run's other forward passes (frozen features, evaluation): a model is evaluated with the
    numerics it was trained with."""
    if precision == "32-true":
        return contextlib.nullcontext()
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}[precision]
    return torch.autocast("cuda" if device.startswith("cuda") else "cpu", dtype=dtype, cache_enabled=False)


def load_run_dataset(config: RunConfig, backbone: Backbone) -> DatasetSplits:
    for name in config.datasets:
        if dataset_info(name).test_only:  # no train split: training on it would silently train nothing
            raise ConfigError(
                f"dataset {name!r} is a test set only (no train split); train on another dataset "
                "(e.g. imagenet) and test on it under a protocol that tests on other datasets (`fedbench run --help`)."
            )
    transforms = clip_transforms(backbone.image_size, backbone.image_mean, backbone.image_std, config.augment)
    root = resolve_data_root(config.data_root)
    # the run seed also draws the test images of a dataset made to draw them per seed (toy world version 7)
    return load_datasets(config.datasets, root, transforms, config.test_datasets, seed=config.seed)


def build_seeded_method(config: RunConfig, backbone: Backbone) -> FederatedMethod:
    # Initialization depends on the run seed and nothing else.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return build_method(config.method, backbone, config.method_args)


def scale_learning_rate(method: FederatedMethod, factor: float) -> None:
    """The method's tuned learning rate (`lr`, what `fedbench tune` chooses) times `factor`,
    the federation kind's rule (`Server.lr_factor`: central rows take the round's steps one
    after another); its optimizers read it each client-round. A method without one is left."""
    if factor != 1.0 and "lr" in method.hparams:
        method.hparams["lr"] = method.hparams["lr"] * factor


@dataclass
class PreparedRun:
    """Everything a run builds from its config before the first round: the seeded method,
    the data, the partition, the federation's kind and the sampled schedule."""

    config: RunConfig
    protocol: Any
    device: str
    precision: str
    method: FederatedMethod
    dataset: DatasetSplits
    validation: dict[str, Any] | None  # the validation split's manifest (eval_split = val)
    partition: Partition
    schedule: list[list[int]]  # the sampled clients of every round (the server's plan starts from it)
    train_inputs: Any  # the training split, or its cached frozen features
    cache_train: bool
    settings: FederationSettings
    attributes: Any
    server: type[Server]  # the federation's kind (`federation`: benchmark.federation.servers)
    augment_backend: str = "pil"  # who augments the training images (benchmark.runs.numerics)

    def plan(self, server: type[Server] | None = None) -> FederationPlan:
        """What trains in which round under the run's federation kind (or under `server`)."""
        return (server or self.server).plan(self.partition.clients, self.schedule, self.config.batch_size)

    def simulator(
        self, progress: bool = False, server: type[Server] | None = None, hooks: RoundHooks | None = None
    ) -> FederatedSimulator:
        """The in-process federation of the run's kind (or of `server`), over its plan; its
        rounds tell `hooks` as they go."""
        server = server or self.server
        plan = self.plan(server)
        return FederatedSimulator(
            self.method,
            self.train_inputs,
            self.dataset.train.labels,
            self.dataset.class_names,
            plan.clients,
            plan.schedule,
            self.config.seed,
            self.settings,
            progress=progress,
            server=server,
            epoch_steps=plan.epoch_steps,
            view_features=SHARED_VIEWS,
            hooks=hooks,
        )

    def finetuner(self) -> FederatedSimulator:
        """The run's clients, each on its own data (`--finetune-epochs`, after the last round)."""
        return self.simulator(server=LocalServer)

    def evaluator(self) -> Evaluator:
        """One evaluator for every evaluated round: it memoizes by state, so a client whose
        state did not change (or a global method's shared state) is scored once."""
        return Evaluator(
            self.method,
            self.dataset.test,
            SHARED_FEATURES,
            self.config.eval_batch_size,
            self.config.num_workers,
            batched=self.config.batched_evaluation,
            metrics=self.config.metrics,
        )


def prepare_run(config: RunConfig, progress: bool = True, train_features: bool = True) -> PreparedRun:
    """Build `config`'s method, data, partition and schedule (under `computing_as(config)`,
    as the caller runs everything); `train_features` False skips caching the training
    images' frozen features (a Flower server trains nothing)."""
    SHARED_FEATURES.progress = progress
    protocol, device, precision = _checked_setup(config)
    backbone = load_backbone(config.backbone, config.pretrained, device)
    method = build_seeded_method(config, backbone)  # validates --method before data loads
    _check_one_attribute_file(config, method)
    dataset = load_run_dataset(config, backbone)
    validation = None
    if config.eval_split == "val":  # tuning: `test` becomes the validation split, the test split is dropped
        dataset, validation = validation_view(dataset)
    partition = protocol.partition(dataset, config)
    # The partition fixes the client count (class-chunk protocols derive it from the classes).
    schedule = client_sampling_schedule(
        len(partition.clients), config.participation, config.rounds, config.seed, config.client_sampling
    )
    server = server_class(config.federation)
    scale_learning_rate(method, server.lr_factor(partition.clients, schedule, config.batch_size))
    method.to(device)
    train_inputs, cache_train, augment_backend = _train_inputs(
        config, method, backbone, dataset, partition, device, precision, train_features
    )
    attributes = None
    if method.uses_class_attributes:
        attributes = load_class_attributes(
            config.dataset, dataset.class_names, resolve_data_root(config.data_root), config.attributes
        )
        method.set_class_attributes(attributes)
    return PreparedRun(
        config,
        protocol,
        device,
        precision,
        method,
        dataset,
        validation,
        partition,
        schedule,
        train_inputs,
        cache_train,
        _federation_settings(config, device, precision),
        attributes,
        server,
        augment_backend,
    )


def _checked_setup(config: RunConfig) -> tuple[Any, str, str]:
    """What must hold before a backbone is built, checked in the order a user fixes it: the
    run's settings, its protocol's options, the device, the weights' reachability, the
    numerics; then the device and precision it resolves to, with TF32 applied."""
    validate_run(config)  # before any backbone is built or pretrained
    protocol = get_protocol(config.protocol)
    protocol.check(config)
    check_device(config.device)  # on the machine that runs it: a sweep's planner may have no GPU
    check_weights_reachable(config.backbone, config.pretrained)  # offline: fail now, not after minutes of retries
    device, precision = resolve_device(config)
    check_numerics(config)
    apply_tf32(device, config.tf32)  # off unless asked: PyTorch's default allows it in convolutions
    return protocol, device, precision


def _check_one_attribute_file(config: RunConfig, method: FederatedMethod) -> None:
    if method.uses_class_attributes and (len(config.datasets) > 1 or config.test_datasets):
        # One attribute file (and one set of sentence frames) per run: a federation over
        # several datasets would need one of each per dataset, which the hook does not take yet.
        raise ConfigError(
            f"{config.method} reads one dataset's class attribute file; it cannot run over several datasets "
            f"yet (dataset = {config.dataset!r}, test datasets = {'+'.join(config.test_datasets)!r}). "
            "Run it on one dataset."
        )


def _train_inputs(
    config: RunConfig,
    method: FederatedMethod,
    backbone: Backbone,
    dataset: DatasetSplits,
    partition: Partition,
    device: str,
    precision: str,
    train_features: bool,
) -> tuple[Any, bool, str]:
    """(the training inputs, whether they are cached frozen features, the augmentation backend)."""
    # Without augmentation the training inputs are deterministic, so frozen-feature
    # methods train on cached features: exact, and the image tower runs once per image.
    cache_train = method.frozen_image_features and not config.augment
    train_inputs = dataset.train
    if cache_train and train_features:
        needed = sorted({i for c in partition.clients for i in c.train_indices})
        with autocast_context(device, precision):
            train_inputs = SHARED_FEATURES.features(method, dataset.train, needed)

    augment_backend = resolved_augment_backend(config, device)
    if augment_backend == "device" and train_features and not cache_train:
        # decoded once (cached on disk) and kept on the device; augmented there a batch at a time
        needed = sorted({i for c in partition.clients for i in c.train_indices})
        train_inputs = DeviceImages(
            dataset.train, needed, device, backbone.image_size, backbone.image_mean, backbone.image_std
        )
    return train_inputs, cache_train, augment_backend


def _federation_settings(config: RunConfig, device: str, precision: str) -> FederationSettings:
    accelerator = "gpu" if device.startswith("cuda") else "cpu"
    return FederationSettings(
        accelerator,
        precision,
        config.num_workers,
        config.batch_size,
        config.local_epochs,
        config.aggregation,
        config.batched_training,
        config.optimizer_state,
    )
