"""`fedbench methods`: the registered methods, one line each (`--describe NAME` for one)."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("methods", help="list the registered methods")
    p.add_argument("--describe", metavar="NAME", help="hyperparameters, shared state and parameter counts of one method")
    p.add_argument("--backbone", default="ViT-B-16", help="backbone for --describe's parameter counts (random weights)")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchmark.registry import PLUGIN_ERRORS, available_methods, method_origin

    if args.describe:
        print(describe(args.describe, args.backbone))
        return 0
    for name, cls in available_methods().items():
        summary = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        origin = method_origin(name)
        suffix = "" if origin == "fedbench" else f"  [{origin}]"
        print(f"{name:<14} {summary}{suffix}")
    for plugin, why in PLUGIN_ERRORS.items():
        print(f"(plugin {plugin} failed to load: {why})")
    return 0


def describe(name: str, backbone_name: str) -> str:
    from benchmark.backbone import load_backbone
    from benchmark.registry import get_method, hyperparameters

    cls = get_method(name)
    lines = [f"{name}: {(cls.__doc__ or '').strip()}", "", "hyperparameters (flag = default):"]
    lines += [f"  --{h.name.replace('_', '-')} {h.type.__name__} = {h.default!r}" for h in hyperparameters(cls)]
    method = cls(load_backbone(backbone_name, None))
    state = method.client_state()
    uploaded = sorted(k for k in state if method.is_uploaded(k))
    personal = sorted(k for k in state if not method.is_uploaded(k))
    counts = method.parameter_counts()
    lines += [
        "",
        f"on {backbone_name}: {counts['trainable_params']:,} trainable parameters, "
        f"{counts['uploaded_params']:,} uploaded per client per round",
        f"uploaded state: {_short(uploaded)}",
        f"personal state: {_short(personal)}",
    ]
    return "\n".join(lines)


def _short(keys: list[str], limit: int = 8) -> str:
    if not keys:
        return "(none)"
    more = f" ... (+{len(keys) - limit} more)" if len(keys) > limit else ""
    return ", ".join(keys[:limit]) + more
