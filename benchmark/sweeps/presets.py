"""Presets: one YAML per paper table, expanded into the cells (runs) that fill it.

A preset file holds
  title, paper_table (optional key into the paper reference numbers),
  run:      RunConfig options shared by every cell (the protocol's options flat or under protocol_args),
  datasets: names, or {name, dataset, targets, run: {per-dataset options}}: `name` labels the
            table section, `dataset` (default: name) is what the runs load, one or a list;
  targets:  for a protocol with parts (its `part_option`; e.g. target domains: fixed | lodo |
            [domains]), per dataset too: one cell per part, the table averages them unweighted,
  methods:  names, or {label, method, method_args, run} variants (ablations; `run`: run options
            of this row only, e.g. the authors' schedule and rules),
  seeds:    list of seeds,
  grid:     optional {option: [values]} axes (shots, beta, ...),
  tuned:    optional {command, budget, values: {label: {hyperparameter: value}}, flags: {label: reason}}:
            values chosen by `fedbench tune` (stored with the command that produced them),
            applied over the variant's own method_args, and the reasons the search flagged a
            choice (the table marks those rows ¶); `fedbench reproduce --tuned` replaces them
            with the table's results/<table>/tuned.yaml.
  cell_seconds: optional seconds one cell takes on the machine the preset was measured on:
            what turns `reproduce --until-resolved --budget 15m` into a number of cells.
Cells = datasets x grid x methods x seeds, each a fully resolved RunConfig.
"""

from __future__ import annotations

import difflib
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.config import ConfigError, RunConfig, build_config, parse_yaml
from benchmark.federation.servers import federation_label

PRESET_DIR = Path(__file__).resolve().parents[1] / "presets"


# Grid axes that make rows of a method rather than columns: `promptfl (local)`, `promptfl (FT 2)`.
# A value's text goes after the label; the default value adds none (the method's own row).
ROW_AXES = {
    "federation": lambda v: federation_label(str(v)),
    "finetune_epochs": lambda v: f"FT {v}" if v else "",
}


@dataclass(frozen=True)
class MethodVariant:
    label: str
    method: str
    method_args: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)  # run options of this row only


@dataclass(frozen=True)
class Cell:
    """One run of a table: the row label (method variant), the column keys, and its config.
    `part`: the protocol's part (a target domain) when the table cell is the mean of several runs."""

    label: str
    dataset: str
    grid: tuple[tuple[str, Any], ...]
    config: RunConfig
    part: str = ""
    hyperparameters: str = "paper"  # `hyperparameter_origin`: paper, tuned, or the values the preset sets
    # An existing run folder read as it is (`fedbench runs`), in place of the one the config names.
    folder: Path | None = None

    @property
    def grid_text(self) -> str:
        """The cell's grid values as the tables show them ("federation=local"; "" for none)."""
        return ", ".join(f"{k}={v}" for k, v in self.grid)


def hyperparameter_origin(set_by_preset: dict[str, Any], tuned: dict[str, Any] | None) -> str:
    """What a table row's hyperparameters are: "paper" (the method's defaults), "tuned"
    (`fedbench tune`'s values), and the values the preset sets itself, written out
    ("depth=3", "tuned, n_ctx=4"), so a row is never called the paper's when it is not."""
    explicit = [f"{k}={_short(v)}" for k, v in set_by_preset.items() if k not in (tuned or {})]
    origin = ["tuned"] if tuned else []
    return ", ".join(origin + explicit) or "paper"


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass
class Preset:
    name: str
    title: str
    run: dict[str, Any]
    datasets: list[dict[str, Any]]
    methods: list[MethodVariant]
    seeds: list[int]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    paper_table: str | None = None
    targets: Any = None  # the protocol's parts, as its `parts` reads them
    tuned: dict[str, dict[str, Any]] = field(default_factory=dict)  # label -> tuned hyperparameters
    tuned_command: str = ""  # the `fedbench tune` command that chose them
    tuned_flags: dict[str, str] = field(default_factory=dict)  # label -> why the search flagged its choice
    tuned_budget: str = ""  # the search every tuned method got, in words (the table's notes say it)
    # The stated wall seconds of one cell (`reproduce --until-resolved --budget 15m` turns a
    # time into this many cells, the same on every machine); None: budgets in cells only.
    cell_seconds: float | None = None

    def cells(
        self,
        overrides: dict[str, Any] | None = None,
        seeds: list[int] | None = None,
        datasets: list[str] | None = None,
        methods: list[str] | None = None,
        tuned: dict[str, dict[str, Any]] | None = None,
    ) -> list[Cell]:
        """Expand into cells; the filters keep only the named seeds/datasets/methods
        (a method filter matches a variant's method name or its label). `tuned` (label ->
        hyperparameters; default: the preset's own) goes over each variant's method_args."""
        tuned = self.tuned if tuned is None else tuned
        cells = []
        for ds, protocol, chosen, variant, seed, part in self._expansion(overrides, seeds, datasets, methods):
            data = ds.get("dataset", ds["name"])
            grid = tuple((k, v) for k, v in chosen if k not in ROW_AXES)  # the others name rows
            suffix = ", ".join(text for k, v in chosen if k in ROW_AXES and (text := ROW_AXES[k](v)))
            config = _resolve_method_file(
                build_config(
                    self.run,
                    ds.get("run", {}),
                    dict(chosen),
                    variant.run,
                    {
                        "dataset": data,
                        "method": variant.method,
                        "seed": seed,
                        # the table's runs together, unless W&B's variable names a group
                        "wandb_group": os.environ.get("WANDB_RUN_GROUP") or self.name,
                    },
                    {protocol.part_option: part} if part else {},
                    {"method_args": variant.method_args},
                    {"method_args": tuned.get(variant.label, {})},
                    overrides or {},
                )
            )
            origin = hyperparameter_origin({**variant.run, **variant.method_args}, tuned.get(variant.label))
            label = f"{variant.label} ({suffix})" if suffix else variant.label
            cells.append(Cell(label, ds["name"], grid, config, part, origin))
        return cells

    def cell_count(self) -> int:
        """How many cells `cells()` expands into, without building their configs (`fedbench
        presets` counts every preset's: building 2,000 configs took a third of its second)."""
        return sum(1 for _ in self._expansion(None, None, None, None))

    def _expansion(self, overrides, seeds, datasets, methods):
        """(dataset entry, protocol class, grid values, variant, seed, part) of each cell, in
        the order `cells()` lists them: the one expansion of the preset's keys."""
        chosen_datasets = [d for d in self.datasets if datasets is None or d["name"] in datasets]
        _check_filter("dataset", datasets, [d["name"] for d in self.datasets], self.name)
        chosen_methods = self.select_methods(methods)
        axes = list(self.grid.items())
        for ds in chosen_datasets:
            targets = ds.get("targets", self.targets)
            protocol = self._protocol(ds, overrides)
            parts = [""] if targets is None else self._targets(ds.get("dataset", ds["name"]), targets, protocol)
            for values in itertools.product(*(v for _, v in axes)):
                chosen = tuple((k, v) for (k, _), v in zip(axes, values))
                for variant in chosen_methods:
                    for seed in seeds if seeds is not None else self.seeds:
                        for part in parts:
                            yield ds, protocol, chosen, variant, seed, part

    def _protocol(self, ds: dict[str, Any], overrides: dict[str, Any] | None):
        """The protocol class of a dataset's cells (a grid over protocols is not expanded here)."""
        from benchmark.protocol_registry import protocol_class  # lazy: the registry imports the protocols

        layers = [self.run, ds.get("run", {}), overrides or {}]
        named = [layer["protocol"] for layer in layers if "protocol" in layer]
        return protocol_class(str(named[-1]) if named else RunConfig.protocol)

    def _targets(self, dataset, targets, protocol) -> list[str]:
        """The protocol's parts (`part_option` values) that `targets:` names on `dataset`."""
        if isinstance(dataset, (list, tuple)) or "+" in str(dataset):
            raise ConfigError(f"preset {self.name}: targets apply to one multi-domain dataset, not {dataset!r}")
        if not protocol.part_option:
            raise ConfigError(
                f"preset {self.name}: targets: expands a protocol's parts (one run per value of its part_option), "
                f"but protocol {protocol.name} has none; remove targets: for dataset {dataset}"
            )
        return protocol.parts(str(dataset), targets)

    def with_tuned(
        self,
        values: dict[str, dict[str, Any]],
        command: str = "",
        flags: dict[str, str] | None = None,
        budget: str = "",
    ) -> "Preset":
        """This preset with `values` (label -> hyperparameters) as its tuned values and `flags`
        (label -> reason) as the search's doubts about them."""
        from dataclasses import replace

        unknown = sorted(set(values) - {m.label for m in self.methods})
        if unknown:  # a method of your own, tuned with --methods, joins the table as select_methods adds it
            from benchmark.registry import available_methods  # lazy: loads torch

            unknown = [label for label in unknown if label not in available_methods()]
        if unknown:
            raise ConfigError(
                f"tuned values for {', '.join(unknown)}, which preset {self.name!r} does not list "
                f"(its methods: {', '.join(m.label for m in self.methods)}) and is no registered method"
            )
        return replace(
            self,
            tuned={k: dict(v) for k, v in values.items()},
            tuned_command=command,
            tuned_flags={str(k): str(v) for k, v in (flags or {}).items() if k in values},
            tuned_budget=budget,
        )

    def select_methods(self, wanted: list[str] | None) -> list[MethodVariant]:
        """The preset's variants named in `wanted`; a registered method the preset does not
        list (your own plugin) joins the table with default hyperparameters."""
        if wanted is None:
            return list(self.methods)

        chosen = [m for m in self.methods if m.method in wanted or m.label in wanted]
        known = {m.method for m in self.methods} | {m.label for m in self.methods}
        for name in wanted:
            if name not in known:
                from benchmark.registry import get_method  # lazy: no torch for --help

                cls = get_method(name)  # unknown everywhere: the registry's error says what exists
                chosen.append(MethodVariant(cls.name, cls.name))  # a file spec joins under its registered name
        return chosen


def _resolve_method_file(config: RunConfig) -> RunConfig:
    """`registry.resolve_method_file`, imported only for a method given as a file: the
    registry loads torch (seconds), which `fedbench presets` and `--dry-run` need not."""
    from benchmark.hyperparameters import is_method_file  # lazy: presets.py loads nothing it does not use

    if not is_method_file(config.method):
        return config
    from benchmark.registry import resolve_method_file  # lazy: the registry imports torch

    return resolve_method_file(config)


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


# Every key a preset may hold at its top level; any other (a typo: `titel:`, `tunned:`) is an error.
PRESET_KEYS = (
    "title",
    "paper_table",
    "run",
    "datasets",
    "methods",
    "seeds",
    "grid",
    "targets",
    "tuned",
    "cell_seconds",
)


def load_preset(name_or_path: str) -> Preset:
    """A preset by name (`benchmark/presets/NAME.yaml`) or a path to a YAML file."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown table {name_or_path!r}: no preset {path}. Presets: {', '.join(available_presets())}; "
            "or pass the path of your own preset YAML."
        )
    data = parse_yaml(path.read_text(), f"preset {path}") or {}
    _check_preset_keys(data, path)
    cell_seconds = data.get("cell_seconds")
    datasets = [d if isinstance(d, dict) else {"name": d} for d in data["datasets"]]
    methods = [
        MethodVariant(m, m)
        if isinstance(m, str)
        else MethodVariant(
            m.get("label", m["method"]), m["method"], dict(m.get("method_args", {})), dict(m.get("run", {}))
        )
        for m in data["methods"]
    ]
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"preset {path}: method labels must be unique, got {labels}")
    tuned = data.get("tuned") or {}
    if tuned and not isinstance(tuned.get("values"), dict):
        raise ConfigError(
            f"preset {path}: tuned must hold 'values: {{label: {{hyperparameter: value}}}}' and 'command'"
        )
    preset = Preset(
        name=path.stem,
        title=data.get("title", path.stem),
        run=dict(data["run"]),
        datasets=datasets,
        methods=methods,
        seeds=[int(s) for s in data["seeds"]],
        grid={k: list(v) for k, v in (data.get("grid") or {}).items()},
        paper_table=data.get("paper_table"),
        targets=data.get("targets"),
        cell_seconds=None if cell_seconds is None else float(cell_seconds),
    )
    if not tuned:
        return preset
    return preset.with_tuned(
        tuned.get("values", {}), str(tuned.get("command", "")), tuned.get("flags") or {}, str(tuned.get("budget", ""))
    )


def _check_preset_keys(data, path: Path) -> None:
    """A preset file's keys and the kinds of their values, each error naming the file and
    what it must hold."""
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path} must hold a mapping (title, run, datasets, methods, seeds)")
    unknown = [k for k in data if k not in PRESET_KEYS]
    if unknown:
        key = unknown[0]
        close = difflib.get_close_matches(str(key), PRESET_KEYS, n=1, cutoff=0.6)
        raise ConfigError(
            f"preset {path}: unknown key {key!r}{f' (did you mean {close[0]!r}?)' if close else ''}; a preset holds "
            f"{', '.join(PRESET_KEYS)} (run options go under run:)"
        )
    missing = [k for k in ("run", "datasets", "methods", "seeds") if k not in data]
    if missing:
        raise ConfigError(f"preset {path} lacks {', '.join(missing)}; see benchmark/presets/base2novel.yaml")
    for key, kind in (
        ("run", dict),
        ("datasets", list),
        ("methods", list),
        ("seeds", list),
        ("grid", (dict, type(None))),
    ):
        if not isinstance(data.get(key), kind):
            raise ConfigError(
                f"preset {path}: {key} must be a {'mapping' if key in ('run', 'grid') else 'list'}, "
                f"got {data.get(key)!r}"
            )
    cell_seconds = data.get("cell_seconds")
    if cell_seconds is not None and (
        isinstance(cell_seconds, bool) or not isinstance(cell_seconds, (int, float)) or cell_seconds <= 0
    ):
        raise ConfigError(f"preset {path}: cell_seconds must be a positive number of seconds, got {cell_seconds!r}")
    if any(not isinstance(s, int) or isinstance(s, bool) for s in data["seeds"]):
        raise ConfigError(f"preset {path}: seeds must be integers, got {data['seeds']!r}")
    if any(not isinstance(d, (str, dict)) or isinstance(d, dict) and "name" not in d for d in data["datasets"]):
        raise ConfigError(f"preset {path}: each dataset is a name or {{name, run}}, got {data['datasets']!r}")
    if any(not isinstance(m, (str, dict)) or isinstance(m, dict) and "method" not in m for m in data["methods"]):
        raise ConfigError(
            f"preset {path}: each method is a name or {{label, method, method_args}}, got {data['methods']!r}"
        )


def _check_filter(kind: str, wanted: list[str] | None, known: list[str], preset: str) -> None:
    unknown = sorted(set(wanted or []) - set(known))
    if unknown:
        raise ConfigError(
            f"preset {preset!r} has no {kind} {', '.join(unknown)}; it has: {', '.join(dict.fromkeys(known))}"
        )
