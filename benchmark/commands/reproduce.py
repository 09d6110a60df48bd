"""`fedbench reproduce TABLE`: regenerate a paper table (resumable), or `--dry-run` to plan."""

from __future__ import annotations

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
    from benchmark.presets import load_preset
    from benchmark.sweep import plan_sweep, run_sweep
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
    plan = plan_sweep(preset, cells)
    print(plan.describe(every_cell=args.dry_run))
    if args.dry_run:
        return 0
    report = run_sweep(plan, results, wandb_mode=cells[0].config.wandb if cells else None)
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
    return 1 if report.failed else 0
