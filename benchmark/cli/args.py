"""Command-line flags generated from `RunConfig` and from a method's `__init__`:
adding a config field or a hyperparameter needs no CLI code. And the helpers the
commands share: argument types, `--set OPTION=VALUE`, `--method-help` / `--print-config`,
the protocol names `--help` lists, read without importing torch."""

from __future__ import annotations

import argparse
import difflib
from typing import Any

from benchmark.config import (
    ConfigError,
    RunConfig,
    build_config,
    config_fields,
    field_help,
    field_type,
    load_yaml,
    parse_bool,
)
from benchmark.sweeps.executors import natural_int, positive_float, positive_int

__all__ = [
    "add_margin_argument",
    "add_quiet_argument",
    "add_run_arguments",
    "answer_without_running",
    "config_from_args",
    "flag_suggestions",
    "method_parser",
    "natural_int",
    "parse_set",
    "positive_float",
    "positive_int",
    "protocol_names",
    "run_option_help",
]


def protocol_names() -> tuple[str, ...]:
    """The registered protocols (benchmark.protocol_registry: it and the protocol modules
    load no torch, which `fedbench --help` must not: tests/system/test_validation.py)."""
    from benchmark.protocol_registry import available_protocols

    return tuple(available_protocols())


def protocol_option_help(name: str) -> str:
    """A protocol option flag's `--help`: what each protocol that declares it says."""
    from benchmark.protocol_registry import available_protocols, option_owners

    protocols, said = available_protocols(), {}
    for protocol in option_owners()[name]:  # protocols that declare it alike share one text
        said.setdefault(protocols[protocol].options[name].describe(), []).append(protocol)
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in said.items())


def run_option_help(name: str) -> str:
    """A RunConfig field's `--help` text: its comment, `{protocols}` filled in with the
    registered protocols."""
    text = field_help(name)
    if "{protocols}" in text:
        text = text.replace("{protocols}", " | ".join(protocol_names()))
    return text


# Protocol option flags land under this prefix in the parsed arguments, apart from run options.
PROTOCOL_FLAG_PREFIX = "protocol_option:"


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE.yaml", help="YAML with run options (flags override it)")
    defaults = RunConfig.__dataclass_fields__
    for f in config_fields():
        kind = field_type(f)
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            type=parse_bool if kind is bool else kind,
            default=argparse.SUPPRESS,  # only flags actually given override the YAML
            metavar=kind.__name__.upper(),
            help=f"{run_option_help(f.name)} (default: {defaults[f.name].default!r})",
        )
        if kind is bool and defaults[f.name].default is True:  # an on-by-default switch: --no-NAME turns it off
            parser.add_argument(
                "--no-" + f.name.replace("_", "-"),
                dest=f.name,
                action="store_false",
                default=argparse.SUPPRESS,
                help=f"the same as --{f.name.replace('_', '-')} false",
            )
    add_protocol_option_flags(
        parser.add_argument_group(
            "protocol options", "each protocol's own options (`--protocol P --protocol-help` lists one protocol's)"
        )
    )
    parser.add_argument(
        "--method-help", action="store_true", help="list the chosen method's hyperparameter flags and exit"
    )
    parser.add_argument(
        "--protocol-help", action="store_true", help="list the chosen protocol's options (flags) and exit"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (YAML, every method hyperparameter; usable as --config) and exit",
    )


def flag_suggestions(tokens: list[str], known: list[str]) -> str:
    """' (--round: did you mean --rounds?)' for each unknown `--flag` among `tokens` that is
    close to one of the `known` flags (a flag it begins, or a near spelling); '' when none is."""
    hints = []
    for token in tokens:
        if not token.startswith("--"):
            continue
        name = token.split("=", 1)[0]
        close = [k for k in known if k.startswith(name) and k != name] or difflib.get_close_matches(
            name, known, n=2, cutoff=0.75
        )
        if close:
            hints.append(f"{name}: did you mean {' or '.join(close[:3])}?")
    return f" ({'; '.join(hints)})" if hints else ""


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """The long flags `parser` takes."""
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--")]


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bars or progress lines (results, notes and errors still print); without it, a bar "
        "redirected to a file or pipe prints plain lines instead of redrawing itself",
    )


# statements.MARGIN, written out: importing the statistics (scipy) would cost every command's
# --help and its input errors seconds; tests/cli check that the two agree.
DEFAULT_MARGIN = 1.0


def add_margin_argument(parser: argparse.ArgumentParser) -> None:
    """--margin of the commands that render a table from runs (`reproduce`, `runs --plot`)."""
    parser.add_argument(
        "--margin",
        type=positive_float,
        default=DEFAULT_MARGIN,
        metavar="POINTS",
        help="a gap between two rows is ≈ (equivalent, TOST) when the seeds show it within this many points "
        "of the headline metric; the marks of the rankings, differences.csv, table.csv's `tied` and the stopping "
        f"rule of `reproduce --until-resolved` use it, and the table's notes print it (default: {DEFAULT_MARGIN:g})",
    )


def method_hyperparameters(method: str) -> list:
    """Method `method`'s hyperparameters: for a built-in method from methods/hyperparameters.json
    while it matches the sources (no torch), else read from its class (which loads torch)."""
    from benchmark.hyperparameters import builtin_hyperparameters, is_method_file

    found = None if is_method_file(method) else builtin_hyperparameters(method)
    if found is None:
        from benchmark.registry import get_method, hyperparameters

        found = hyperparameters(get_method(method))
    return found


def method_parser(method: str, hyperparameters: list | None = None) -> argparse.ArgumentParser:
    """`method`'s flags: of `hyperparameters` when the caller has them already."""
    parser = argparse.ArgumentParser(prog=f"fedbench run --method {method}", add_help=False, allow_abbrev=False)
    for h in method_hyperparameters(method) if hyperparameters is None else hyperparameters:
        parser.add_argument(
            "--" + h.name.replace("_", "-"),
            dest=h.name,
            type=_flag_type(h),
            default=argparse.SUPPRESS,
            metavar="|".join([h.type.__name__.upper(), *h.keywords]),
            choices=h.choices or None,
            help=h.describe().replace("%", "%%"),
        )
    return parser


def _flag_type(h) -> Any:
    """argparse's converter for hyperparameter `h` (its words such as 'auto' taken as they are),
    named by the type so that a bad value reads "invalid int value"."""

    def convert(text: str) -> Any:
        return h.parse(text)

    convert.__name__ = h.type.__name__
    return convert


def add_protocol_option_flags(parser) -> None:
    """One flag per option any protocol declares (`--beta`); a given flag lands in
    `protocol_options_given`, an absent one nowhere (the YAML's value or the default stands)."""
    from benchmark.protocol_registry import option_owners

    for name in option_owners():
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=PROTOCOL_FLAG_PREFIX + name,
            default=argparse.SUPPRESS,
            metavar="VALUE",  # converted and checked against the chosen protocol's declaration
            help=protocol_option_help(name).replace("%", "%%"),
        )


def protocol_options_given(args: argparse.Namespace) -> dict[str, Any]:
    """The protocol option flags given on the command line, by option name."""
    return {k[len(PROTOCOL_FLAG_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(PROTOCOL_FLAG_PREFIX)}


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """defaults < YAML (--config) < flags; method flags are parsed against the method."""
    yaml_layer = load_yaml(args.config) if args.config else {}
    flag_layer = {f.name: getattr(args, f.name) for f in config_fields() if hasattr(args, f.name)}
    flag_layer.update(protocol_options_given(args))
    method = flag_layer.get("method", yaml_layer.get("method", RunConfig.method))
    method_flags: dict[str, Any] = {}
    extra = getattr(args, "extra", [])
    known_hyperparameters = None  # read once: the manifest (digesting methods/) or the classes
    if extra:
        from benchmark.hyperparameters import MethodError

        known_hyperparameters = method_hyperparameters(method)
        flags = method_parser(method, known_hyperparameters)
        parsed, unknown = flags.parse_known_args(extra)
        if unknown:
            known = option_strings(flags) + list(getattr(args, "command_flags", []))
            raise MethodError(
                f"unrecognized arguments {' '.join(unknown)}{flag_suggestions(unknown, known)} for method "
                f"{method!r}; its flags are listed by `fedbench run --method {method} --method-help`"
            )
        method_flags = vars(parsed)
    from benchmark.hyperparameters import check_values, is_method_file

    config = build_config(yaml_layer, flag_layer, {"method_args": method_flags})
    if is_method_file(config.method):
        from benchmark.registry import resolve_method_file  # imports the file, and torch

        config = resolve_method_file(config)
    # Before any model or data is loaded, and for a built-in method before torch is.
    # A method file keeps its class when resolved to its registered name: the same hyperparameters.
    if known_hyperparameters is None:
        known_hyperparameters = method_hyperparameters(config.method)
    check_values(config.method, known_hyperparameters, config.method_args)
    return config


def answer_without_running(args: argparse.Namespace, config: RunConfig) -> bool:
    """`--method-help`, `--protocol-help` and `--print-config` print their answer and run nothing."""
    if getattr(args, "protocol_help", False):
        from benchmark.protocol_registry import protocol_class

        cls = protocol_class(config.protocol)
        print(f"protocol {cls.name}: {(cls.__doc__ or '').strip().splitlines()[0] if cls.__doc__ else ''}")
        print("options (flags, or YAML keys flat or under protocol_args:):" if cls.options else "options: none")
        for name, option in cls.options.items():
            print(f"  --{name.replace('_', '-')} {option.type.__name__.upper()}  {option.describe()}")
        return True
    if args.method_help:
        method_parser(config.method).print_help()
        return True
    if args.print_config:
        import yaml

        from benchmark.runs.identity import resolved_config

        print(yaml.safe_dump(resolved_config(config).to_dict(), sort_keys=False), end="")
        return True
    return False


def parse_set(items: list[str]) -> dict[str, str]:
    """`--set OPTION=VALUE ...` as a mapping (values are converted by build_config)."""
    overrides = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set takes OPTION=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key] = value
    return overrides
