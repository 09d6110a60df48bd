"""`fedbench methods`: the registered methods, one line each (`--describe NAME` for one)."""

from __future__ import annotations

import inspect


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "methods",
        help="list the registered methods",
        description="List the registered methods, or describe one. With --describe, the method's "
        "hyperparameter flags (as for `fedbench run`, e.g. --n-ctx 4) set the instance that is counted.",
    )
    p.add_argument(
        "--describe",
        metavar="NAME",
        help="hyperparameters, shared state, parameter counts, learning-rate schedule and the whole contract of one "
        "method (core, optional settings, capabilities and the Lightning surface local training reads: the hooks "
        "it overrides, the values it sets): a registered name or, as for `fedbench run --method`, "
        "path/to/file.py[:Class]",
    )
    p.add_argument("--backbone", default="ViT-B-16", help="backbone for --describe's parameter counts (random weights)")
    p.set_defaults(func=run, takes_method_flags=True)


def run(args) -> int:
    from benchmark.cli import listing

    extra = getattr(args, "extra", [])
    if args.describe:
        print(describe(args.describe, args.backbone, method_flags(args.describe, extra)))
        return 0
    if extra:
        from benchmark.config import ConfigError

        raise ConfigError(
            f"unrecognized arguments {' '.join(extra)}; method hyperparameter flags go with --describe NAME"
        )
    # Read without torch when nothing changed since the last listing (benchmark/cli/listing.py).
    found, errors = listing.methods()
    for name, entry in found.items():
        suffix = "" if entry["origin"] == "fedbench" else f"  [{entry['origin']}]"
        print(f"{name:<14} {entry['summary']}{suffix}")
    for plugin, why in errors.items():
        print(f"(plugin {plugin} failed to load: {why})")
    return 0


def method_flags(name: str, extra: list[str]) -> dict:
    """The method hyperparameters given as flags (`--n-ctx 4`), parsed against method `name`."""
    from benchmark.cli.args import flag_suggestions, method_parser, option_strings
    from benchmark.registry import MethodError

    if not extra:
        return {}
    flags = method_parser(name)
    parsed, unknown = flags.parse_known_args(extra)
    if unknown:
        raise MethodError(
            f"unrecognized arguments {' '.join(unknown)}{flag_suggestions(unknown, option_strings(flags))} for "
            f"method {name!r}; its flags are listed by `fedbench run --method {name} --method-help`"
        )
    return vars(parsed)


def describe(name: str, backbone_name: str, method_args: dict | None = None) -> str:
    from benchmark.backbone import load_backbone
    from benchmark.hyperparameters import is_method_file
    from benchmark.registry import build_method, get_method, hyperparameters, load_method_file, method_origin

    if is_method_file(name):  # `--describe path/to/file.py:Class`, as `run --method` takes it
        name = load_method_file(name)  # the name it registers under; its origin is the file
    cls = get_method(name)
    method_args = dict(method_args or {})
    lines = [
        f"{name}: {(cls.__doc__ or '').strip()}",
        f"(class {cls.__module__}.{cls.__qualname__}, from {method_origin(name)})",
        "",
        "hyperparameters (flag = default):",
    ]
    for h in hyperparameters(cls):
        lines.append(
            f"  --{h.name.replace('_', '-')} {h.type_name} = {h.default!r}"
            + (f"  (one of {' | '.join(map(str, h.choices))})" if h.choices else "")
            + (f"  ({h.range})" if h.range is not None else "")
        )
        if h.help:
            lines.append(f"      {h.help}")
    method = build_method(name, load_backbone(backbone_name, None), method_args)
    state = method.client_state()
    uploaded = sorted(k for k in state if method.is_uploaded(k))
    personal = sorted(k for k in state if not method.is_uploaded(k))
    counts = method.parameter_counts()
    given = ", ".join(f"{k} = {v!r}" for k, v in method_args.items())
    lines += [
        "",
        f"on {backbone_name}{f' with {given}' if given else ''}: {counts['trainable_params']:,} trainable parameters, "
        f"{counts['uploaded_params']:,} uploaded per client per round",
        *(
            f"  {key.replace('_', ' ')}: {value:,}"
            for key, value in counts.items()
            if key not in ("trainable_params", "uploaded_params")
        ),
        f"uploaded state (upload_keys = {cls.upload_keys!r}): {_short(uploaded)}",
        f"personal state: {_short(personal)}",
        f"learning-rate schedule: {schedule_line(cls)}",
        "",
        "the contract (`help(benchmark.method.FederatedMethod.<hook>)` says when each hook runs and what it returns):",
    ]
    lines += contract_lines(cls, method)
    return "\n".join(lines)


def schedule_line(cls) -> str:
    """The method's `lr_schedule`, or what to do about a method that states none."""
    stated = " ".join(str(getattr(cls, "lr_schedule", "") or "").split())
    return stated or "not stated (the method sets no lr_schedule class attribute; its configure_optimizers decides)"


def contract_parts() -> tuple[tuple[str, tuple], ...]:
    """(title, members) of the three parts FederatedMethod declares (`benchmark.method`):
    what `fedbench new-method`'s skeleton writes."""
    from benchmark.method_contract import CAPABILITIES, CORE, OPTIONAL

    return (
        ("core", CORE),
        ("optional settings", OPTIONAL),
        ("capabilities (optional performance opt-ins)", CAPABILITIES),
    )


def described_parts() -> tuple[tuple[str, tuple], ...]:
    """The whole contract: the three parts and the Lightning surface local training reads
    and offers (`benchmark.method_contract.LIGHTNING`), as --describe and the guide's table show it."""
    from benchmark.method_contract import LIGHTNING

    return (*contract_parts(), ("lightning (what local training reads and offers)", LIGHTNING))


def contract_lines(cls, method) -> list[str]:
    """Each part of the contract: its attributes' values on `method` (read from the instance:
    some are set from hyperparameters, pFedMMA's upload_keys, FedMVP's
    automatic_optimization), and for each hook where this method overrides it or the
    default it keeps."""
    from benchmark.registry import overrides

    lines = []
    for title, members in described_parts():
        lines.append(f"  {title}:")
        for m in members:
            if m.kind == "provided":
                lines.append(f"    {m.name:<21} provided: {m.returns}")
            elif m.kind == "attribute":
                lines.append(f"    {m.name} = {_shown(getattr(method, m.name))}")
            elif overrides(cls, m.name):
                owner = next(c for c in cls.__mro__ if m.name in vars(c))
                lines.append(f"  * {m.name:<21} overridden in {owner.__module__}.{owner.__qualname__}")
            else:
                lines.append(f"    {m.name:<21} default: {m.default}")
    return lines


def _shown(value) -> str:
    """An attribute's value; a mapping's values as they read (`ranges`: `lr: > 0`)."""
    if isinstance(value, dict) and value:
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return repr(value)


def contract_table() -> str:
    """The contract table of docs/writing-a-method.md (scripts/write_contract_table.py writes
    it there; tests/core/test_method.py checks it is current)."""
    rows = ["| | hook / attribute | when | returns | default |", "|---|---|---|---|---|"]
    for title, members in described_parts():
        for m in members:
            if m.kind == "hook":
                call = f"`{m.name}({_arguments(m.name)})`"
            else:
                call = f"`self.{m.name}`" if m.kind == "provided" else f"`{m.name}`"
            rows.append(f"| {title.split(' (')[0]} | {call} | {m.when} | {m.returns} | {m.default} |")
    return "\n".join(rows)


def _arguments(hook: str) -> str:
    from benchmark.method import FederatedMethod

    names = list(inspect.signature(getattr(FederatedMethod, hook)).parameters)
    return ", ".join(n for n in names if n not in ("self", "cls"))


def _short(keys: list[str], limit: int = 8) -> str:
    if not keys:
        return "(none)"
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
