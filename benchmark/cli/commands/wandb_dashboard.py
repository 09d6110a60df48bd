"""`fedbench wandb-dashboard TABLE`: the W&B report of a table's runs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

INSTALL = "pip install -c constraints.txt -e '.[wandb]' (from the checkout; `make install` brings it)"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "wandb-dashboard",
        help="set up the W&B report of a reproduced table (HM by method, metrics per dataset, curves)",
        description="Writes the dashboard specification to --spec and creates the report in your W&B project "
        "(needs a W&B login and the `wandb` extra: wandb-workspaces). Exits 1, saying why, when no report was "
        "made; the spec file is written either way.",
    )
    p.add_argument("table", help="preset name or path")
    p.add_argument("--project", default=None, help="W&B project (default: $WANDB_PROJECT, else fedbench)")
    p.add_argument("--entity", default=None, help="W&B entity (default: $WANDB_ENTITY, else your default entity)")
    p.add_argument(
        "--group", default=None, help="W&B group of the table's runs (default: $WANDB_RUN_GROUP, else the table's name)"
    )
    p.add_argument("--spec", default=None, help="where to write the spec JSON (default: results/TABLE/dashboard.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    from benchmark.evaluation.protocols import get_protocol
    from benchmark.sweeps.dashboard import dashboard_spec, publish
    from benchmark.sweeps.presets import load_preset

    preset = load_preset(args.table)
    project = args.project or os.environ.get("WANDB_PROJECT") or "fedbench"
    entity = args.entity or os.environ.get("WANDB_ENTITY") or None
    metrics = get_protocol(preset.run.get("protocol", "base2novel")).metrics
    spec = dashboard_spec(preset, project, metrics, args.group or os.environ.get("WANDB_RUN_GROUP") or None)
    path = Path(args.spec or Path("results") / preset.name / "dashboard.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=2) + "\n")
    print(f"dashboard spec ({len(spec['panels'])} panels) written to {path}")
    try:
        import wandb_workspaces  # noqa: F401  (the `wandb` extra)
    except ImportError:
        return _no_report(f"wandb-workspaces is not installed: {INSTALL}, then run this command again")
    if not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").is_file():
        return _no_report("not logged in to W&B: run `wandb login` (or set WANDB_API_KEY), then this command again")
    try:
        url = publish(spec, entity)
    except Exception as exc:  # the cloud is out of our hands; the spec file is still there
        return _no_report(f"W&B refused the report ({exc.__class__.__name__}: {exc}); the spec is in {path}")
    print(f"report: {url}")
    return 0


def _no_report(why: str) -> int:
    print(f"fedbench wandb-dashboard: no report was made: {why}", file=sys.stderr)
    return 1
