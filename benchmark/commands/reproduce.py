"""`fedbench reproduce TABLE`: regenerate a paper table (resumable), or `--dry-run` to plan."""

from __future__ import annotations

import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    from benchmark.presets import available_presets

    p = subparsers.add_parser(
        "reproduce",
        help="regenerate a table of the paper from its preset (resumable)",
        description="Expands the preset into runs (datasets x methods x seeds x grid), skips runs whose "
        "results already exist for the same resolved config, runs the rest, and renders the table "
        "(Markdown, CSV, LaTeX, paper comparison, radar plot, per-round curves) into --results. "
        f"Presets: {', '.join(available_presets())}; or a path to your own preset YAML.",
    )
    p.add_argument("table", help="preset name or path to a preset YAML")
    p.add_argument("--seeds", type=int, nargs="+", help="only these seeds")
    p.add_argument("--datasets", nargs="+", help="only these datasets")
    p.add_argument("--methods", nargs="+", help="only these methods (a registered method not in the preset is added)")
    p.add_argument("--dry-run", action="store_true", help="list every cell, which are done, and the missing data with how to get it")
    p.add_argument("--force", action="store_true", help="rerun the selected cells even when their results exist")
    p.add_argument("--out", help="folder of the run folders (default: runs/TABLE)")
    p.add_argument("--results", help="folder of the rendered table (default: results/TABLE)")
    p.add_argument("--data-root", help="dataset root (default: $FEDBENCH_DATA or ~/.cache/fedbench/data)")
    p.add_argument("--device", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--wandb", choices=["auto", "online", "offline", "disabled"], help="W&B mode (default: auto)")
    p.add_argument("--set", nargs="+", metavar="OPTION=VALUE", default=[], help="override run options, e.g. rounds=5")
    p.add_argument(
        "--tuned", action="store_true",
        help="apply the hyperparameters `fedbench tune TABLE` chose (RESULTS/tuned.yaml); the table marks those rows 'tuned'",
    )
    p.set_defaults(func=run)


def run_tags(preset: str, args) -> tuple[str, ...]:
    """W&B tags telling runs of one group apart: the preset, the filters, the overrides
    (a smoke run with `--set rounds=2` is tagged so, never mistaken for the full table)."""
    tags = [f"preset:{preset}"]
    for key in ("seeds", "datasets", "methods"):
        if getattr(args, key):
            tags.append(f"{key}:{','.join(map(str, getattr(args, key)))}"[:64])
    tags += [f"set:{item}"[:64] for item in args.set]
    if args.force:
        tags.append("forced")
    return tuple(tags)


def parse_set(items: list[str]) -> dict[str, str]:
    """`--set OPTION=VALUE ...` as a mapping (values are converted by build_config)."""
    from benchmark.config import ConfigError

    overrides = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--set takes OPTION=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        overrides[key] = value
    return overrides


def run(args) -> int:
    from benchmark.config import ConfigError
    from benchmark.presets import load_preset
    from benchmark.sweep import needed_datasets, plan_sweep, run_sweep
    from benchmark.tuning import TUNED_YAML, load_tuned

    preset = load_preset(args.table)
    results = Path(args.results or Path("results") / preset.name)
    if getattr(args, "tuned", False):
        preset = preset.with_tuned(load_tuned(results / TUNED_YAML), f"see {results / TUNED_YAML}")
    overrides = {"out": args.out or str(Path("runs") / preset.name)}
    for key in ("data_root", "device", "wandb"):
        if getattr(args, key):
            overrides[key] = getattr(args, key)
    overrides.update(parse_set(args.set))
    cells = preset.cells(overrides, args.seeds, args.datasets, args.methods)
    filtered = any(getattr(args, k) for k in ("seeds", "datasets", "methods"))
    plan = plan_sweep(preset, cells, force=args.force, shown=preset.cells(overrides) if filtered else None)
    print(plan.describe(every_cell=args.dry_run))
    if args.dry_run:
        return 0
    if plan.invalid:  # checked before any cell runs or any model is built
        raise ConfigError("; ".join(f"cannot run {label}: {why}" for label, why in plan.invalid.items()))
    report = run_sweep(plan, results, wandb_mode=cells[0].config.wandb if cells else None, tags=run_tags(preset.name, args))
    print(f"ran {len(report.ran)} runs, {len(plan.done)} were already done, "
          f"{len(report.skipped)} skipped for missing data, {len(report.failed)} failed")
    if report.busy or report.done_elsewhere:
        print(f"another process on {cells[0].config.out}: {len(report.done_elsewhere)} cells finished by it meanwhile, "
              f"{len(report.busy)} being run by it now (not in this table yet)")
    for name, error in report.failed.items():
        print(f"FAILED {name}: {error}")
    if report.files.get("md"):
        print(report.files["md"].read_text())
        print("wrote " + ", ".join(str(p) for p in report.files.values()))
    # A cell that was asked for and did not run is never a silent success.
    problems = []
    if report.skipped:
        problems.append(
            f"{len(report.skipped)} of the {len(plan.todo)} cells to run were skipped because their data is missing ("
            + "; ".join(f"{d}: {plan.missing_datasets[d]}" for d in needed_datasets(
                [c.dataset for c in report.skipped], report.skipped) if d in plan.missing_datasets)
            + ")"
        )
    if report.failed:
        problems.append(f"{len(report.failed)} cells failed (see FAILED above)")
    if problems:
        verdict = "nothing it was asked to run ran" if not report.ran else "the table is incomplete"
        print(f"fedbench reproduce: {verdict}: " + "; ".join(problems), file=sys.stderr)
        return 1
    return 0
