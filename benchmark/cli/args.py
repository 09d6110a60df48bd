"""Command-line flags generated from `RunConfig` and from a method's `__init__`:
adding a config field or a hyperparameter needs no CLI code."""

from __future__ import annotations

import argparse
from typing import Any

from benchmark.config import RunConfig, build_config, config_fields, field_help, field_type, load_yaml, parse_bool


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
            help=f"{field_help(f.name)} (default: {defaults[f.name].default!r})",
        )
        if kind is bool and defaults[f.name].default is True:  # an on-by-default switch: --no-NAME turns it off
            parser.add_argument(
                "--no-" + f.name.replace("_", "-"),
                dest=f.name,
                action="store_false",
                default=argparse.SUPPRESS,
                help=f"the same as --{f.name.replace('_', '-')} false",
            )
    parser.add_argument(
        "--method-help", action="store_true", help="list the chosen method's hyperparameter flags and exit"
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (YAML, every method hyperparameter; usable as --config) and exit",
    )


def method_parser(method: str) -> argparse.ArgumentParser:
    from benchmark.registry import get_method, hyperparameters  # loads the methods (torch): only when used

    parser = argparse.ArgumentParser(prog=f"fedbench run --method {method}", add_help=False, allow_abbrev=False)
    for h in hyperparameters(get_method(method)):
        parser.add_argument(
            "--" + h.name.replace("_", "-"),
            dest=h.name,
            type=parse_bool if h.type is bool else h.type,
            default=argparse.SUPPRESS,
            metavar=h.type.__name__.upper(),
            choices=h.choices or None,
            help=h.describe().replace("%", "%%"),
        )
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """defaults < YAML (--config) < flags; method flags are parsed against the method."""
    yaml_layer = load_yaml(args.config) if args.config else {}
    flag_layer = {f.name: getattr(args, f.name) for f in config_fields() if hasattr(args, f.name)}
    method = flag_layer.get("method", yaml_layer.get("method", RunConfig.method))
    method_flags: dict[str, Any] = {}
    extra = getattr(args, "extra", [])
    if extra:
        from benchmark.registry import MethodError

        parsed, unknown = method_parser(method).parse_known_args(extra)
        if unknown:
            raise MethodError(
                f"unrecognized arguments {' '.join(unknown)} for method {method!r}; its flags are listed by "
                f"`fedbench run --method {method} --method-help`"
            )
        method_flags = vars(parsed)
    from benchmark.registry import check_method_args, resolve_method_file  # lazy: start-up time (torch)

    config = resolve_method_file(build_config(yaml_layer, flag_layer, {"method_args": method_flags}))
    check_method_args(config.method, config.method_args)  # before any model or data is loaded
    return config
