"""`fedbench demo` runs every registered method on the toy preset: each must build on the
toy CLIP (4 blocks per tower) with the arguments the toy presets give it."""

from __future__ import annotations

import pytest

from benchmark.backbone import load_backbone
from benchmark.registry import available_methods, build_method
from benchmark.sweeps.presets import load_preset


@pytest.mark.parametrize("preset", ["toy", "toy_fedmvp"])
def test_every_method_of_the_toy_tables_builds_on_the_toy_clip(preset):
    backbone = load_backbone("fedbench-toy-vit", None)  # random weights: only the architecture matters
    demo = [m for m in available_methods() if not m.startswith("test_")]
    cells = load_preset(preset).cells(methods=demo if preset == "toy" else None)
    assert {c.config.method for c in cells} >= ({"fedtpg", "fedcocoop", "fedvpt", "fedmaple", "fedclip"})
    for cell in cells:
        build_method(cell.config.method, backbone, cell.config.method_args)


def test_demo_passes_reproduce_every_option_it_reads(monkeypatch):
    """`fedbench demo` calls `reproduce` in-process: its arguments must carry every option
    reproduce reads (a new reproduce flag once broke the demo with an AttributeError)."""
    from benchmark.cli import build_parser
    from benchmark.cli.commands import demo, reproduce

    seen = {}
    monkeypatch.setattr(reproduce, "run", lambda args: seen.setdefault("args", args) and 0)
    # with the parser `main` builds for `fedbench demo` alone (it once lacked reproduce's: KeyError)
    assert demo.run(build_parser("demo").parse_args(["demo", "--wandb", "disabled", "--workers", "3"])) == 0
    args = seen["args"]
    assert (args.table, args.wandb, args.dry_run, args.tuned) == ("toy", "disabled", False, False)
    # W cells at a time, one torch thread each: the demo's numbers do not depend on the machine
    assert (args.executor, args.workers, args.cpus_per_cell) == ("local", 3, 1)
    assert reproduce.make_executor(args).workers == 3  # reads every executor option
    # seeds where they decide, within the demo's 15 minutes as cells: the same number on every machine
    from benchmark.sweeps.resolve import budget_cells

    assert (args.until_resolved, args.budget) == (True, "15m")
    assert budget_cells(args.budget, load_preset("toy").cell_seconds, "toy") == 75  # 900 s at the stated 12 s a cell


@pytest.mark.parametrize("preset", ["pfedmma_authors", "pfedmma_authors_real"])
def test_the_authors_preset_puts_their_rules_beside_the_suites(preset):
    cells = {c.label: c for c in load_preset(preset).cells(seeds=[1])}
    suite, authors = cells["pfedmma"].config, cells["pfedmma (authors' rules)"].config
    assert (suite.optimizer_state, suite.select_round) == ("per_client", "final")
    assert (authors.optimizer_state, authors.select_round) == ("shared", "best_local_test")
    assert (authors.rounds, authors.local_epochs, authors.method_args.get("lr", 0.001)) == (100, 1, 0.001)
    shared = cells["pfedmma (shared optimizer)"].config
    assert (shared.optimizer_state, shared.select_round) == ("shared", "final")
    # a row's hyperparameters column names every rule and value its preset sets
    assert "optimizer_state=shared" in cells["pfedmma (authors' rules)"].hyperparameters
    assert "select_round=best_local_test" in cells["pfedmma (authors' rules)"].hyperparameters


def test_the_cell_count_is_the_number_of_cells_of_every_preset():
    """`fedbench presets` counts cells without building their configs (Preset.cell_count):
    the same expansion as `cells()`, targets (one cell per held-out domain) included."""
    from benchmark.sweeps.presets import available_presets

    for name in available_presets():
        preset = load_preset(name)
        assert preset.cell_count() == len(preset.cells()), name
