"""The method contract, declared as data: every hook a method may override, every class
attribute it may set, and what of a LightningModule local training reads and offers.

`benchmark.method` holds the classes (`FederatedMethod`, `Capabilities`) whose hooks and
attributes these tuples describe; the registry's checks, the contract table of
docs/writing-a-method.md, `fedbench new-method`'s skeleton and `fedbench methods --describe`
read them from here. No torch: the CLI lists the contract without loading a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Member:
    """One entry of the method contract: a hook a method may override or a class attribute it
    may set. `when`, `returns` and `default` are the contract table's cells
    (docs/writing-a-method.md); each hook's docstring says the same at length."""

    name: str
    kind: Literal["hook", "attribute", "provided"]  # provided: what local training gives a method to call or read
    when: str
    returns: str
    default: str


# The method contract, declared once: the registry's HOOKS and CLASS_ATTRIBUTES, the
# contract table of docs/writing-a-method.md, `fedbench new-method`'s skeleton and
# `fedbench methods --describe` are all read from these three tuples, and
# tests/core/test_method.py checks that they name every public hook and attribute of
# FederatedMethod and Capabilities. LIGHTNING (below them) declares what of a
# LightningModule local training reads and offers.
#
# CORE: what every method author must know: what is computed, how it trains, what travels.
CORE: tuple[Member, ...] = (
    Member(
        "encode_images",
        "hook",
        "every image batch (training and evaluation), unless cached features are passed",
        "image features `[B, D]` (or what `classify` expects)",
        "the frozen CLIP image feature, normalized",
    ),
    Member(
        "encode_classes",
        "hook",
        "every training batch; once per class set in evaluation (Local, Base, Novel)",
        "what `classify` needs about the classes",
        'zero-shot "a photo of a {name}." text features',
    ),
    Member(
        "classify",
        "hook",
        "after the two encoders",
        "logits `[B, C]`",
        "logit scale × cosine",
    ),
    Member(
        "training_step",
        "hook",
        "each local training batch",
        "the loss",
        "cross-entropy over the client's classes",
    ),
    Member(
        "configure_optimizers",
        "hook",
        "start of each client-round (a fresh optimizer each time)",
        "an optimizer (and scheduler)",
        "raises: required if anything trains",
    ),
    Member(
        "upload_keys",
        "attribute",
        "after each client's training: fnmatch patterns over `state_dict()` keys of what is sent to the server",
        "–",
        "`()`: nothing uploaded",
    ),
    Member(
        "aggregate",
        "hook",
        "on the server (`benchmark.federation.server.Server`, which every runtime calls) after each round",
        "the aggregate state",
        "FedAvg with each update's `aggregation_weight`",
    ),
    Member(
        "download",
        "hook",
        "on the server, at the start of a client's round and once before evaluation; it may read its "
        "arguments and the hyperparameters, not the module's parameters (on Flower the server's module is "
        "no client's)",
        "the (partial) state the client loads; the rest stays personal",
        "the aggregate",
    ),
)
# OPTIONAL: settings that change what a method computes or how it is checked and tuned;
# most methods keep their defaults.
OPTIONAL: tuple[Member, ...] = (
    Member(
        "ranges",
        "attribute",
        "checked with the hyperparameters' types before anything is built: the only check of a value besides `Literal`",
        "–",
        "`{}`: no bound",
    ),
    Member(
        "tunable",
        "attribute",
        "read by `fedbench tune`: hyperparameter -> search range (`LogUniform`, `Uniform`, `Choice`)",
        "–",
        "`{}`: nothing to tune",
    ),
    Member(
        "lr_schedule",
        "attribute",
        "shown by `fedbench methods --describe`: one line on how the learning rate moves",
        "–",
        '`""`: not stated',
    ),
    Member(
        "fit_to_backbone",
        "hook",
        "classmethod, before anything is built, with the backbone's shape read from its config",
        "the hyperparameters, backbone-relative values resolved; ValueError when they cannot fit",
        "unchanged",
    ),
    Member(
        "on_client_state_loaded",
        "hook",
        "called by `load_client_state` after a state is copied in, outside any step",
        "–: read on the host here what a step would otherwise read (a sync per step on CUDA)",
        "nothing",
    ),
    Member(
        "evaluate_after_download",
        "attribute",
        "read by evaluation",
        "–",
        "`True`: evaluate with the final download applied",
    ),
    Member(
        "uses_class_attributes",
        "attribute",
        "read by the run: load the dataset's attribute file and call `set_class_attributes`",
        "–",
        "`False`",
    ),
    Member(
        "set_class_attributes",
        "hook",
        "once before training, if `uses_class_attributes`",
        "nothing",
        "keeps them as `self.class_attributes`",
    ),
    Member(
        "parameter_counts",
        "hook",
        "once per run, for summary.json and `fedbench methods --describe`",
        '`{"trainable_params": n, "uploaded_params": m}` and any count of the method\'s own (FedMVP: its LoRA switch)',
        "the trainable parameters and those uploaded",
    ),
)
# CAPABILITIES: performance opt-ins, declared on the `Capabilities` mixin. A method that
# declares none is correct, only slower; each is a promise the method must keep.
CAPABILITIES: tuple[Member, ...] = (
    Member(
        "frozen_image_features",
        "attribute",
        "read by training and evaluation: `encode_images` uses nothing trainable, so image features are "
        "computed once and cached",
        "–",
        "`False`",
    ),
    Member(
        "image_feature_kind",
        "attribute",
        "names what a frozen `encode_images` returns (the feature cache's key)",
        "–",
        '`"clip"`',
    ),
    Member(
        "frozen_image_blocks",
        "attribute",
        "read by evaluation: the leading image blocks `encode_images` leaves as the frozen backbone's (no "
        "wrapper, no visual prompt); they run once per test image for all clients, and `encode_images` gets "
        "their output (`ImagePrefix`) in place of images; may be set per instance",
        "–",
        "`0`",
    ),
    Member(
        "batched_evaluation",
        "attribute",
        "read by evaluation: score a round's clients in one `torch.func.vmap` pass over `encode_classes`, "
        "`image_features` and `classify`; `False` when they branch on tensor values or call `.item()` (a run "
        "probes it on its first evaluation and falls back with a warning)",
        "–",
        "`True`",
    ),
    Member(
        "batched_training",
        "attribute",
        "read by the simulator: train a round's clients in one `torch.func.vmap` pass per step "
        "(`--batched-training true`); `True` only with the default `training_step`, no other Lightning hook, "
        "one `torch.optim.SGD`, no random draw in the forward (dropout), and `encode_classes` split into "
        "`class_inputs` and `encode_class_inputs`; a run probes one step against the client loop's and falls "
        "back with a warning",
        "–",
        "`False`",
    ),
    Member(
        "class_inputs",
        "hook",
        "only with `batched_training`: once per round for its clients' class lists",
        "a tuple of tensors, each stacked over the lists, made from frozen parts alone (tokens, a cached text "
        "prefix, frozen text features)",
        "raises: not split",
    ),
    Member(
        "encode_class_inputs",
        "hook",
        "only with `batched_training`, under `vmap`: one list's row of `class_inputs`; no `.item()` or Python "
        "branch on tensor values",
        "what `encode_classes` returns; `encode_classes(names)` is then "
        "`encode_class_inputs(first(class_inputs([names])))`, the one path both ways take",
        "raises: not split",
    ),
    Member(
        "gpu_precision",
        "attribute",
        'what `--precision auto` picks on a GPU; "32-true" when the trained state changes the towers by less '
        "than bf16's matrix products blur them (pFedMMA, LoRA)",
        "–",
        '`"bf16-mixed"`',
    ),
)
CONTRACT: tuple[Member, ...] = CORE + OPTIONAL + CAPABILITIES
# Public methods of FederatedMethod that a method calls and never overrides: training and
# every metric go through `logits` = classify(image_features(x), encode_classes(names)).
HELPERS = (
    "logits",
    "image_features",
    "set_client",
    "client_state",
    "load_client_state",
    "uploaded_state",
    "upload_of",
    "is_uploaded",
)

_AUTOMATIC = "under automatic optimization (never under manual: `manual_backward` calls no hook)"
# LIGHTNING: the LightningModule surface local training (`benchmark.federation.client_loop`)
# reads, calls and offers, as a Trainer's fit would; nothing else of Lightning is run (a
# method overriding another hook a Trainer calls is refused: UNCALLED_HOOKS). LightningModule
# defines these, so FederatedMethod does not repeat them; tests/core/test_method.py checks
# that every name the loops read of a method is declared here or in CONTRACT.
LIGHTNING: tuple[Member, ...] = (
    Member(
        "automatic_optimization",
        "attribute",
        "read at the start of each client-round: `True`, the loop zeroes the gradients, calls backward and "
        "steps the one optimizer per batch, and steps the schedulers; `False`, `training_step` does it through "
        "`self.optimizers()` and `self.manual_backward` and steps its own schedulers (FedMVP)",
        "–",
        "`True`",
    ),
    Member(
        "trainer",
        "provided",
        "read in any hook during local training",
        "`max_epochs`, `current_epoch`, `global_step`, `num_training_batches` and `estimated_stepping_batches` "
        "as on a Trainer (LoRA's cosine length); nothing else of a Trainer",
        "the client loop's Fabric",
    ),
    Member(
        "log",
        "provided",
        "`self.log(name, value, ...)` in `training_step`",
        "a per-epoch mean weighted by the batch size; the round's loss is the last epoch's mean of \"train_loss\"",
        "–",
    ),
    Member(
        "optimizers",
        "provided",
        "under manual optimization, in `training_step`",
        "what `configure_optimizers` returned",
        "–",
    ),
    Member(
        "manual_backward",
        "provided",
        "under manual optimization, in `training_step`",
        "nothing: the backward, through the run's precision (autocast, the fp16 gradient scaler)",
        "–",
    ),
    Member(
        "on_fit_start", "hook", "at the start of each client-round, once its optimizers are made", "nothing", "nothing"
    ),
    Member("on_train_start", "hook", "after `on_fit_start` (FedMVP starts its step rule)", "nothing", "nothing"),
    Member("on_train_epoch_start", "hook", "at the start of each local epoch", "nothing", "nothing"),
    Member(
        "on_train_batch_start",
        "hook",
        "before each batch's step",
        "-1 ends the epoch (its schedulers still step as after its last batch); anything else, nothing",
        "nothing",
    ),
    Member("on_before_zero_grad", "hook", f"{_AUTOMATIC}, before each step's `zero_grad`", "nothing", "nothing"),
    Member("on_before_backward", "hook", f"{_AUTOMATIC}, before each backward", "nothing", "nothing"),
    Member("on_after_backward", "hook", f"{_AUTOMATIC}, after each backward", "nothing", "nothing"),
    Member("on_before_optimizer_step", "hook", f"{_AUTOMATIC}, before each optimizer step", "nothing", "nothing"),
    Member(
        "on_train_batch_end",
        "hook",
        "after each batch's step, with `{\"loss\": <detached>, ...training_step's other entries}` (`{}` for a "
        "skipped step)",
        "nothing",
        "nothing",
    ),
    Member("on_train_epoch_end", "hook", "at the end of each local epoch", "nothing", "nothing"),
    Member("on_train_end", "hook", "after the client-round's last epoch", "nothing", "nothing"),
    Member("on_fit_end", "hook", "after `on_train_end`", "nothing", "nothing"),
)


# Lightning hooks a Trainer's fit calls that the client loop (benchmark.federation.client_loop)
# does not: overriding one would change what a client-round computes, so `benchmark.registry`
# refuses such a method with this list.
UNCALLED_HOOKS = (
    "setup",
    "teardown",
    "configure_model",
    "configure_gradient_clipping",
    "optimizer_step",
    "optimizer_zero_grad",
    "lr_scheduler_step",
    "backward",
    "transfer_batch_to_device",
    "on_before_batch_transfer",
    "on_after_batch_transfer",
)
