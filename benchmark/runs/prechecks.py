"""Everything about a run that can be checked before a model is built or pretrained.

`fedbench run` and `fedbench reproduce` call `validate_run` first, so an unknown method, a
hyperparameter of the wrong type or outside its range (`FederatedMethod.ranges`), a method
that does not fit the backbone's shape (`fit_to_backbone`, read from the backbone's config),
a toy dataset on the toy CLIP of another world version (`world.pretrained_mismatch`), a
missing dataset or missing weights are reported in a second rather than after the toy
CLIP's pretraining or a backbone download. What needs the built model (a value only the
method's constructor rejects) is still checked when it is built.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

import data.toy  # noqa: F401  (registers the toy CLIP's weights and their identity)
from benchmark.backbone_weights import check_backbone
from benchmark.config import ConfigError
from benchmark.protocol_registry import get_protocol
from benchmark.registry import check_method_args, fit_method_args_to
from data.catalog import dataset_info, require_dataset, resolve_data_root
from data.toy import world as toy_world

if TYPE_CHECKING:
    from benchmark.config import RunConfig


def check_device(device: str) -> None:
    """A CUDA device that this machine does not have is a ConfigError saying what to pass (else
    it surfaces later as a checkpoint that cannot be loaded onto it). Checked where the run
    runs (`resolve_device`, `fedbench run`), not by `validate_run`: a sweep's cells may run
    on other machines than the one that plans them (Ray, Slurm)."""
    if not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        raise ConfigError(
            f"--device {device}: this machine has no CUDA device (torch.cuda.is_available() is False"
            f"{'; this torch is a CPU build' if torch.version.cuda is None else ''}). "
            "Pass --device cpu, or --device auto (a GPU when there is one, else the CPU)."
        )
    index = device.partition(":")[2]
    if index and (not index.isdigit() or int(index) >= torch.cuda.device_count()):
        raise ConfigError(
            f"--device {device}: this machine has {torch.cuda.device_count()} CUDA device(s), "
            f"cuda:0 to cuda:{torch.cuda.device_count() - 1}; pass one of them, or --device auto"
        )


def validate_run(config: "RunConfig", check_data: bool = True) -> list[str]:
    """Raise the user error of the first thing that cannot work; return notes about weights
    that are not on this machine yet (built or downloaded by the run)."""

    get_protocol(config.protocol)
    check_method_args(config.method, config.method_args)  # unknown method, names, types, ranges
    for name in config.datasets + config.test_datasets:
        dataset_info(name)
        mismatch = toy_world.pretrained_mismatch(name, config.pretrained)
        if mismatch:  # a toy CLIP of another world version: numbers that measure nothing
            raise ConfigError(mismatch)
        if check_data:
            require_dataset(name, resolve_data_root(config.data_root))

    note = check_backbone(config.backbone, config.pretrained)
    # The method against the backbone's shape, read from its config: a block range that
    # does not fit fails here, not after the weights are downloaded or pretrained.
    fit_method_args_to(config.method, config.method_args, config.backbone)
    return [note] if note else []
