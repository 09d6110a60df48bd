"""The resolved configuration of one run, and the one precedence rule for building it.

Precedence, lowest to highest: `RunConfig` defaults < YAML file (`--config`) < explicit
command-line flags. Method hyperparameters live in `method_args` (YAML) or as their own
flags (`--lr 0.01`); both are validated against the method's `__init__` signature.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from benchmark.errors import ConfigError
from benchmark.protocol_registry import option_owners, protocol_class, resolve_protocol_args
from benchmark.values import coerce, dataset_list, parse_bool  # noqa: F401  (dataset_list, parse_bool: imported from here too)

# The entry-point group of method plugins (benchmark.registry loads them); here, without torch,
# so that `fedbench methods` can tell whether any is installed before it imports the registry.
ENTRY_POINT_GROUP = "fedbench.methods"
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed")  # Lightning precisions the backbone supports
SAMPLING_RULES = (
    "authors",
    "uniform",
)  # client sampling rules: benchmark.federation.simulator.client_sampling_schedule
AUGMENT_BACKENDS = ("auto", "device", "pil")  # run option `augment_backend` (benchmark.runs.numerics)
FEDERATIONS = ("fedavg", "local", "central")  # run option `federation`: one server each (benchmark.federation.servers)
# The authors' rules, named run options beside the suite's (docs/methods.md, Deviations): the first is the default.
OPTIMIZER_STATES = ("per_client", "shared")  # run option `optimizer_state` (benchmark.federation.client_loop)
ROUND_SELECTIONS = ("final", "best_local_test")  # run option `select_round` (benchmark.evaluation.round_selection)


# What a run option is to the three places that sort them, as metadata on RunConfig's fields
# (`dataclasses.field(metadata=...)`), read through `fields_where`; True where a field says nothing:
#   identity  it can change a number: hashed into the cell's identity (`RunConfig.result_key`,
#             benchmark.runs.identity), so `reproduce` reuses a run folder only for the same
#             values; WHEN_SET: hashed only away from its default, so an option added later keeps
#             every earlier cell's identity (and its shipped run folders)
#   logged    W&B's run config carries it (benchmark.runs.tracking)
#   compared  `fedbench runs` shows it among the settings that differ between runs
#             (benchmark.sweeps.compare)
MARKS = ("identity", "logged", "compared")
WHEN_SET = "when_set"
OWN_FILES = {"identity": False, "logged": False, "compared": False}  # where files go, W&B's own settings
WHERE_IT_RAN = {"identity": False, "compared": False}  # where a run ran or read from, not what ran
NO_NUMBER = {"identity": False}  # how a run went about it, no number changes (tested)


@dataclass
class RunConfig:
    """One run: a method on a dataset under a protocol. Field docs become `--help` texts."""

    # One field a line: its comment is its --help text (_field_comments reads them).
    # fmt: off

    method: str = "promptfl"  # registered method name (`fedbench methods`)
    dataset: str = "toy"  # dataset name (`fedbench datasets`); several joined by '+' (a YAML list works too)
    # protocol's {protocols}: the registered protocols (benchmark.protocol_registry; cli/args.py fills them in)
    protocol: str = "base2novel"  # {protocols}; its options: --protocol P --protocol-help
    shots: int = 16  # training images per class (0 = all)
    rounds: int = 50  # communication rounds
    local_epochs: int = 2  # local epochs per round
    clients: int = 8  # number of clients (the paper: 10; the default toy dataset's 16 base classes allow 8)
    participation: float = 1.0  # fraction of clients sampled each round
    client_sampling: str = "authors"  # authors (round 1 trains all clients, then int(participation*clients)) | uniform (round(participation*clients) every round)
    federation: str = "fedavg"  # fedavg (the method's federation) | local (every client trains alone on its own data, nothing uploaded) | central (one client holding the union of the clients' training data, as many steps as the federation at the lr times a client-round's steps over its round's; scored on every client's test data)
    finetune_epochs: int = 0  # after the last round each client trains the state it is scored with for K local epochs on its own data, then is scored (+FT); 0 = none
    aggregation: str = "samples"  # server weights: samples (FedAvg by n_i) | uniform (plain mean, the FedTPG/FedMVP harness)
    optimizer_state: str = "per_client"  # per_client (a fresh optimizer and schedule every client-round) | shared (one optimizer whose momentum and schedule carry across clients and rounds, as the official pFedMMA code: the authors' rule, docs/methods.md)
    select_round: str = "final"  # final (the last round is scored) | best_local_test (every round is evaluated and the one with the best mean Local is reported, as the official pFedMMA code: selection on the evaluated split, marked "selected on test" in tables)
    batch_size: int = 32  # local training batch size
    seed: int = 1  # run seed: few-shot sample, client sampling, initialization, shuffling
    backbone: str = "fedbench-toy-vit"  # open_clip model name
    pretrained: str = "fedbench-toy"  # open_clip tag, local checkpoint path, or 'none'
    augment: bool = False  # random-resized-crop + flip for training (the CLIP protocol uses it)
    eval_split: str = "test"  # test | val: score on the validation split instead (`fedbench tune`; the test split is then never read)
    eval_batch_size: int = field(default=256, metadata=NO_NUMBER)  # evaluation batch size
    # Hashed when set: a run with extra metrics records more (its cells are new), and the cells without them keep their identity.
    metrics: str = field(default="", metadata={"identity": WHEN_SET})  # extra torchmetrics metrics scored on every request beside the accuracy, joined by ',': macro_accuracy, calibration_error or a torchmetrics class path taking num_classes (torchmetrics.classification.MulticlassF1Score); reported as <request>/<name> per client and as the mean over clients (benchmark.evaluation.metrics); none by default
    # Evaluating more rounds adds rows to metrics.csv, never changes a number (tested).
    eval_every: int = field(default=0, metadata=NO_NUMBER)  # evaluate every K rounds into metrics.csv / W&B / curves (0 = about 5 points per run; the last round always)
    data_root: str = field(default="", metadata=OWN_FILES)  # dataset root ('' = $FEDBENCH_DATA or ~/.cache/fedbench/data)
    # A folder: the attribute file read there is hashed into the identity instead.
    attributes: str = field(default="", metadata=WHERE_IT_RAN)  # class attribute files folder, <dataset>.json ('' = <data root>/attributes)
    out: str = field(default="runs", metadata=OWN_FILES)  # folder receiving the run folder
    device: str = field(default="auto", metadata=WHERE_IT_RAN)  # auto | cpu | cuda | cuda:N
    precision: str = "auto"  # auto (on a GPU the method's choice, its gpu_precision: `fedbench methods --describe M`; 32-true on CPU) | 32-true | bf16-mixed | 16-mixed
    shortcuts: bool = True  # exact compute shortcuts: the text tower stops at the longest prompt, frozen prefixes are computed once (docs/performance.md); false (--no-shortcuts) runs the plain path, equal up to float rounding
    batched_evaluation: bool = False  # score a round's clients in one vmapped pass where the method allows (its batched_evaluation), equal up to float rounding; off by default: on this suite's CPU it was slower for pFedMMA and PromptFL, faster for LoRA (results/perf.md)
    batched_training: bool = False  # train a round's clients in one vmapped pass where the method allows (its batched_training), equal up to float rounding; off by default: on the toy demo it moved PromptFL's row by float rounding (docs/toy-world.md), and the shipped tables are the client-by-client path's
    augment_backend: str = "auto"  # auto (device on a GPU when augment is on, else pil; recorded resolved in the identity) | device (images decoded once and kept on the device, RandomResizedCrop + flip from pil's seeded draws, resized as PIL resizes in one batched pass: pil's pixels in most views, docs/performance.md) | pil (torchvision on PIL images, per image: exact reproduction of earlier numbers)
    compile_blocks: bool = False  # run the CLIP towers' residual blocks compiled with torch.compile (fused kernels: fewer launches on a GPU), equal up to float rounding and part of the identity; off by default (the shipped tables are eager); not with the batched passes
    tf32: bool = False  # let 32-bit matrix products and convolutions use TF32 on CUDA (faster, 10-bit mantissas); off by default, and part of the identity; no effect on CPU
    num_workers: int = field(default=0, metadata=WHERE_IT_RAN)  # data-loader workers
    checkpoint_every: int = field(default=-1, metadata=NO_NUMBER)  # save a round checkpoint every K rounds, to resume after a kill or preemption (0 = never; -1 = when 5 minutes passed since the last)
    keep_checkpoints: bool = field(default=False, metadata=NO_NUMBER)  # keep the round checkpoint after the run folder is written
    # A path: the identity names the source run by its folder name (benchmark.runs.identity).
    evaluate_from: str = field(default="", metadata=NO_NUMBER)  # a finished run folder whose saved clients are scored without training (`fedbench evaluate RUN_DIR`); its name is in the identity
    wandb: str = field(default="auto", metadata=OWN_FILES)  # auto (online when logged in, else offline) | online | offline | disabled
    wandb_project: str = field(default="", metadata=OWN_FILES)  # W&B project ('' = $WANDB_PROJECT, else fedbench)
    wandb_entity: str = field(default="", metadata=OWN_FILES)  # W&B entity, a user or team ('' = $WANDB_ENTITY, else your default entity)
    wandb_group: str = field(default="", metadata=OWN_FILES)  # W&B group ('' = $WANDB_RUN_GROUP, else PROTOCOL-DATASET; `fedbench reproduce`: the table name)
    wandb_tags: str = field(default="", metadata=OWN_FILES)  # W&B tags, joined by ',', added to the suite's own ('' = $WANDB_TAGS)
    wandb_name: str = field(default="", metadata=OWN_FILES)  # W&B run name ('' = $WANDB_NAME, else the run folder's name)
    method_args: dict[str, Any] = field(default_factory=dict)  # the method's hyperparameters
    protocol_args: dict[str, Any] = field(default_factory=dict)  # the protocol's options, every one resolved
    # fmt: on

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        checks = [
            (self.rounds >= 1, "rounds", "an integer >= 1"),
            (self.local_epochs >= 1, "local_epochs", "an integer >= 1"),
            (self.clients >= 1, "clients", "an integer >= 1"),
            (0 < self.participation <= 1, "participation", "a fraction in (0, 1]"),
            (self.batch_size >= 1, "batch_size", "an integer >= 1"),
            (self.eval_every >= 0, "eval_every", "an integer >= 0 (0 = about 5 evaluations per run)"),
            (self.shots >= 0, "shots", "an integer >= 0 (0 = all images)"),
            (self.precision in PRECISIONS, "precision", ", ".join(PRECISIONS)),
            (self.client_sampling in SAMPLING_RULES, "client_sampling", " or ".join(SAMPLING_RULES)),
            (self.aggregation in {"samples", "uniform"}, "aggregation", "samples or uniform"),
            (self.federation in FEDERATIONS, "federation", " | ".join(FEDERATIONS)),
            (self.finetune_epochs >= 0, "finetune_epochs", "an integer >= 0 (0 = no fine-tuning)"),
            (self.wandb in {"auto", "disabled", "offline", "online"}, "wandb", "auto, online, offline or disabled"),
            (self.checkpoint_every >= -1, "checkpoint_every", "K >= 1 rounds, 0 (never) or -1 (every 5 minutes)"),
            (self.eval_split in {"test", "val"}, "eval_split", "test or val"),
            (self.optimizer_state in OPTIMIZER_STATES, "optimizer_state", " or ".join(OPTIMIZER_STATES)),
            (self.select_round in ROUND_SELECTIONS, "select_round", " or ".join(ROUND_SELECTIONS)),
        ]
        for ok, name, expected in checks:
            if not ok:
                raise ConfigError(f"{name} = {getattr(self, name)!r} is invalid: expected {expected}")
        names = [n.strip() for n in self.metrics.split(",")] if self.metrics.strip() else []
        if any(not n for n in names) or len(set(names)) != len(names):
            raise ConfigError(
                f"metrics = {self.metrics!r} is invalid: expected metric names joined by ',', each once, "
                "e.g. macro_accuracy,calibration_error"
            )
        if self.augment_backend not in AUGMENT_BACKENDS:
            raise ConfigError(
                f"augment_backend = {self.augment_backend!r} is invalid: expected {' | '.join(AUGMENT_BACKENDS)}"
            )
        if self.compile_blocks and (self.batched_training or self.batched_evaluation):
            raise ConfigError(
                "compile_blocks = true cannot be combined with batched_training or batched_evaluation (a vmapped "
                "pass runs the blocks uncompiled): turn one of them off"
            )
        parts = dataset_list(self.dataset)
        if not parts or any(not p for p in parts) or len(set(parts)) != len(parts):
            raise ConfigError(
                f"dataset = {self.dataset!r} is invalid: expected dataset names joined by '+', "
                "each once, e.g. caltech101+dtd"
            )
        if not isinstance(self.protocol_args, dict):
            raise ConfigError(f"protocol_args must be a mapping, got {self.protocol_args!r}")
        # Every option of the protocol, checked against its declaration, defaults written out:
        # what a run records and its cell hashes.
        self.protocol_args = protocol_arguments(self.protocol, self.protocol_args)

    @property
    def datasets(self) -> list[str]:
        """The datasets of the run's federation, in order (`dataset` split at '+')."""
        return dataset_list(self.dataset)

    @property
    def test_datasets(self) -> list[str]:
        """Datasets tested without being trained on (the protocol's say: transfer's `eval_datasets`)."""

        return protocol_class(self.protocol).test_datasets(self.protocol_args)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def result_key(self) -> dict[str, Any]:
        """The options that can change a number (`identity` marks): what a cell's identity hashes."""
        hashed = {f.name: f.metadata.get("identity", True) for f in fields(self)}
        defaults = {f.name: f.default for f in fields(self)}
        return {
            k: v for k, v in self.to_dict().items() if hashed[k] is True or (hashed[k] == WHEN_SET and v != defaults[k])
        }


def fields_where(**marks: Any) -> tuple[str, ...]:
    """The names of RunConfig's fields whose marks (`MARKS`, True where a field's metadata
    says nothing) are as given: `fields_where(logged=False)` are the options W&B never sees."""
    unknown = sorted(set(marks) - set(MARKS))
    if unknown:
        raise ValueError(f"no run option mark {unknown[0]!r}; the marks are {', '.join(MARKS)}")
    return tuple(
        f.name for f in fields(RunConfig) if all(f.metadata.get(mark, True) == want for mark, want in marks.items())
    )


def config_fields() -> list[dataclasses.Field]:
    return [f for f in fields(RunConfig) if f.name not in ("method_args", "protocol_args")]


def protocol_arguments(protocol: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every option of `protocol`, `given` checked against its declaration (ConfigError)."""

    clash = sorted(set(protocol_class(protocol).options) & {f.name for f in fields(RunConfig)})
    if clash:
        raise ConfigError(f"protocol {protocol}: its option {clash[0]!r} has the name of a run option; rename it")
    return resolve_protocol_args(protocol, given)


def field_help(name: str) -> str:
    """The comment after a field in the class body, used as its `--help` text."""
    return _field_comments().get(name, "")


@functools.lru_cache(maxsize=1)
def _field_comments() -> dict[str, str]:
    # Read the class body once (inspect.getsource per field made `fedbench --help` slow).
    import inspect

    comments = {}
    for line in inspect.getsource(RunConfig).splitlines():
        stripped = line.strip()
        name = stripped.split(":", 1)[0]
        if name.isidentifier() and "#" in stripped:
            comments.setdefault(name, stripped.split("#", 1)[1].strip())
    return comments


def field_type(f: dataclasses.Field) -> type:
    return _run_config_hints()[f.name]


@functools.cache
def _run_config_hints() -> dict[str, Any]:
    # Resolving the annotations costs ~2 ms and build_config asks once per field: uncached,
    # a 3-method `fedbench tune` spent 27 of its 43 s here (planning builds configs often).
    return typing.get_type_hints(RunConfig)


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses duplicate keys: PyYAML keeps the last one silently, so
    `rounds: 50` followed later by `rounds: 5` would run 5 rounds without a word."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
            seen[key] = True
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> data, with duplicate keys and syntax errors as ConfigErrors naming `source`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {exc}") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder; expected a YAML file, e.g. {path / 'config.yaml'}")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    data = parse_yaml(_read_text(path), f"config file {path}") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of option: value, got {type(data).__name__}")
    data.pop(IDENTITY_KEY, None)  # a run folder's record of its identity; recomputed, never trusted
    return data


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read as text ({exc.__class__.__name__}: {exc})") from None


def build_config(*layers: dict[str, Any]) -> RunConfig:
    """Merge layers (later wins) into a RunConfig. Unknown keys are errors, not ignored.
    The protocol's options go under `protocol_args:` or flat (`beta: 0.3`, as their flags)."""
    known = {f.name for f in fields(RunConfig)}
    merged: dict[str, Any] = {}
    method_args: dict[str, Any] = {}
    protocol_args: dict[str, Any] = {}
    flat: list[str] = []  # keys that are no run option: the protocol's, or unknown
    for layer in layers:
        for key, value in layer.items():
            if not isinstance(key, str):
                raise ConfigError(f"option names are text, got {key!r}: {value!r}")
            key = key.replace("-", "_")
            if key in ("method_args", "protocol_args"):
                if not isinstance(value, dict):
                    raise ConfigError(f"{key} must be a mapping, got {value!r}")
                (method_args if key == "method_args" else protocol_args).update(value)
            elif key in known:
                merged[key] = value
            else:
                protocol_args[key] = value
                flat.append(key)
    protocol = str(merged.get("protocol", RunConfig.protocol))

    options = protocol_class(protocol).options
    for key in flat:
        if key not in options:
            run_options = sorted(known - {"method_args", "protocol_args"})
            close = difflib.get_close_matches(key, run_options + list(options), n=1, cutoff=0.75)
            owners = option_owners().get(key)
            raise ConfigError(
                f"unknown option {key!r}{f' (did you mean {close[0]!r}?)' if close else ''}"
                + (f": an option of protocol {', '.join(owners)}, not of {protocol}" if owners else "")
                + f". Run options: {', '.join(run_options)}; protocol {protocol}'s options: "
                f"{', '.join(options) or 'none'}; method hyperparameters go under method_args: in YAML."
            )
    for f in config_fields():
        if f.name in merged:
            merged[f.name] = _coerce(f.name, field_type(f), merged[f.name])
    return RunConfig(**merged, method_args=method_args, protocol_args=protocol_args)


def _coerce(name: str, kind: type, value: Any) -> Any:
    """`value` as a `kind`, or a ConfigError. Stricter than Python's constructors: YAML
    `rounds: true` is not 1, `rounds: null` is no number, `rounds: 2.5` is no integer."""
    if name == "dataset" and isinstance(value, (list, tuple)):
        value = "+".join(str(v) for v in value)  # a YAML list of datasets: one canonical string
    try:
        return coerce(kind, value)
    except (TypeError, ValueError):
        expected = "a finite number" if kind is float else kind.__name__
        raise ConfigError(f"{name} = {value!r} is invalid: expected {expected}") from None


def typed_options(options: dict[str, Any]) -> dict[str, Any]:
    """Run options as a run reads them (`--set rounds=2` gives the text "2"; a run, 2): a run
    option as its field's type, any other (a protocol's) as YAML reads its text."""
    kinds = {f.name: field_type(f) for f in config_fields()}
    typed = {}
    for key, value in options.items():
        key = str(key).replace("-", "_")
        if key in kinds:
            typed[key] = _coerce(key, kinds[key], value)
        else:
            typed[key] = yaml.safe_load(value) if isinstance(value, str) else value
    return typed


IDENTITY_KEY = "identity"  # written into a run's config.yaml for the record; ignored when read back
