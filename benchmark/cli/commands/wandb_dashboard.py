"""`fedbench wandb-dashboard TABLE`: the W&B report of a table's runs."""

from __future__ import annotations

import json
from pathlib import Path


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "wandb-dashboard",
        help="set up the W&B report of a reproduced table (HM by method, metrics per dataset, curves)",
        description="Writes the dashboard specification to --spec and, when you are logged in to W&B "
        "and `pip install wandb-workspaces` is done, creates the report in your project.",
    )
    p.add_argument("table", help="preset name or path")
    p.add_argument("--project", default="fedbench", help="W&B project (default: fedbench)")
    p.add_argument("--entity", help="W&B entity (default: your default entity)")
    p.add_argument("--spec", default=None, help="where to write the spec JSON (default: results/TABLE/dashboard.json)")
    p.set_defaults(func=run)


def run(args) -> int:
    import os

    from benchmark.evaluation.protocols import get_protocol
    from benchmark.sweeps.dashboard import dashboard_spec, publish
    from benchmark.sweeps.presets import load_preset

    preset = load_preset(args.table)
    metrics = get_protocol(preset.run.get("protocol", "base2novel")).metrics
    spec = dashboard_spec(preset, args.project, metrics)
    path = Path(args.spec or Path("results") / preset.name / "dashboard.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=2) + "\n")
    print(f"dashboard spec ({len(spec['panels'])} panels) written to {path}")
    if not os.environ.get("WANDB_API_KEY") and not (Path.home() / ".netrc").is_file():
        print("not logged in to W&B: run `wandb login`, then this command again, to create the report")
        return 0
    try:
        url = publish(spec, args.entity)
    except ImportError:
        print("to create the report: `pip install wandb-workspaces`, then run this command again")
        return 0
    except Exception as exc:  # the cloud is out of our hands; the spec file is still there
        print(f"W&B refused the report ({exc.__class__.__name__}: {exc}); the spec is in {path}")
        return 1
    print(f"report: {url}")
    return 0
