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
        description="Creates the report in your W&B project (needs a W&B login and the `wandb` extra: "
        "wandb-workspaces) and writes the dashboard specification beside the table. Exits 1, saying why, when no "
        "report was made; the spec file is then written only where --spec asks.",
    )
    p.add_argument("table", help="preset name or path")
    p.add_argument("--project", default=None, help="W&B project (default: $WANDB_PROJECT, else fedbench)")
    p.add_argument("--entity", default=None, help="W&B entity (default: $WANDB_ENTITY, else your default entity)")
    p.add_argument(
        "--group", default=None, help="W&B group of the table's runs (default: $WANDB_RUN_GROUP, else the table's name)"
    )
    p.add_argument(
        "--spec",
        default=None,
        help="where to write the spec JSON, whether or not a report is made (default: results/TABLE/dashboard.json, "
        "once the report exists)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from benchmark.cli.outputs import check_output_file
    from benchmark.config import RunConfig
    from benchmark.files import atomic_write
    from benchmark.protocol_registry import get_protocol
    from benchmark.sweeps.dashboard import dashboard_spec, publish
    from benchmark.sweeps.presets import load_preset

    if args.spec:  # checked before the W&B client loads: a wrong path is exit 2, not a traceback
        check_output_file(args.spec, "--spec")
    preset = load_preset(args.table)
    project = args.project or os.environ.get("WANDB_PROJECT") or "fedbench"
    entity = args.entity or os.environ.get("WANDB_ENTITY") or None
    metrics = get_protocol(preset.run.get("protocol", RunConfig.protocol)).metrics
    spec = dashboard_spec(preset, project, metrics, args.group or os.environ.get("WANDB_RUN_GROUP") or None)
    path = Path(args.spec or Path("results") / preset.name / "dashboard.json")

    def write_spec() -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(spec, indent=2) + "\n")
        print(f"dashboard spec ({len(spec['panels'])} panels) written to {path}")

    def no_report(why: str) -> int:
        # A failed call leaves nothing in the table's folder; --spec asked for the file anyway.
        if args.spec:
            write_spec()
        hint = "" if args.spec else " (--spec FILE writes the specification without a report)"
        print(f"fedbench wandb-dashboard: no report was made: {why}{hint}", file=sys.stderr)
        return 1

    try:
        import wandb_workspaces  # noqa: F401  (the `wandb` extra)
    except ImportError:
        return no_report(f"wandb-workspaces is not installed: {INSTALL}, then run this command again")
    if not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").is_file():
        return no_report("not logged in to W&B: run `wandb login` (or set WANDB_API_KEY), then this command again")
    try:
        url = publish(spec, entity)
    except Exception as exc:  # the cloud is out of our hands
        return no_report(f"W&B refused the report ({exc.__class__.__name__}: {exc})")
    write_spec()
    print(f"report: {url}")
    return 0
