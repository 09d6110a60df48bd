"""The W&B dashboard of a reproduced table, as a plain specification.

`dashboard_spec` says which panels a table's dashboard has; `publish` turns it into a
W&B report with the `wandb-workspaces` package when the user is logged in. Keeping the
specification separate makes it testable offline and reusable for other front ends.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from benchmark.sweeps.presets import Preset


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str  # "bar" (a summary value per run group) | "line" (a metric over rounds)
    metrics: tuple[str, ...]
    group_by: tuple[str, ...] = ()  # run config keys / job_type the panel groups on
    filters: dict[str, Any] = field(default_factory=dict)


def dashboard_spec(preset: Preset, project: str, metrics: tuple[str, ...], group: str | None = None) -> dict[str, Any]:
    """Panels: the headline metric by method; every metric per dataset; per-round curves.
    `group`: the W&B group of the table's runs (default: the table's name, as reproduce groups them)."""
    group = group or preset.name
    headline = "HM" if "HM" in metrics else metrics[0]
    datasets = [d["name"] for d in preset.datasets]
    panels = [Panel(f"{headline} by method", "bar", (headline,), ("job_type",), {"group": group})]
    panels += [
        Panel(
            f"{' / '.join(metrics)} on {dataset}",
            "bar",
            metrics,
            ("job_type",),
            {"group": group, "config.dataset": dataset},
        )
        for dataset in datasets
    ]
    panels += [
        Panel(f"{headline} per round", "line", (headline,), ("job_type",), {"group": group}),
        Panel("train loss per round", "line", ("train_loss/mean",), ("job_type",), {"group": group}),
        Panel("bytes uploaded per round", "line", ("bytes_up",), ("job_type",), {"group": group}),
    ]
    return {
        "project": project,
        "title": f"fedbench: {preset.title}",
        "group": group,
        "panels": [asdict(p) for p in panels],
    }


def runset_filter(filters: dict[str, Any]) -> str:
    """A panel's filters as a W&B runset filter expression (group, config keys)."""
    terms = []
    for key, value in filters.items():
        field = "Group" if key == "group" else f"Config('{key.removeprefix('config.')}')"
        terms.append(f"{field} = '{value}'")
    return " and ".join(terms)


def panel_grids(spec: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Panels grouped by their runset filter, in order: a W&B panel grid shows the runs of
    its runsets, so per-dataset panels need a grid (and runset) of their own, or every
    per-dataset chart would mix all datasets."""
    grids: dict[str, list[dict[str, Any]]] = {}
    for panel in spec["panels"]:
        grids.setdefault(runset_filter(panel["filters"]), []).append(panel)
    return list(grids.items())


def publish(spec: dict[str, Any], entity: str | None = None) -> str:
    """Create the report on W&B; returns its URL. Needs a login and `wandb-workspaces`."""
    import wandb_workspaces.reports.v2 as wr  # optional dependency, only for this command

    blocks = []
    for filters, panels in panel_grids(spec):
        runset = wr.Runset(project=spec["project"], entity=entity or "", filters=filters)
        grid_panels = []
        for panel in panels:
            if panel["kind"] == "line":
                grid_panels.append(wr.LinePlot(title=panel["title"], x="round", y=list(panel["metrics"])))
            else:
                grid_panels.append(
                    wr.BarPlot(
                        title=panel["title"],
                        metrics=list(panel["metrics"]),
                        groupby=panel["group_by"][0] if panel["group_by"] else None,
                    )
                )
        blocks.append(wr.PanelGrid(runsets=[runset], panels=grid_panels))
    report = wr.Report(project=spec["project"], entity=entity or "", title=spec["title"], blocks=blocks)
    report.save()
    return report.url
