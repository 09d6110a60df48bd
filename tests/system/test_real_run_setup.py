"""No silent toy on real data, and the docs' Table 1 command is the preset's cell (issue 35, item 5)."""

from __future__ import annotations

import shlex
from pathlib import Path

from conftest import tiny_run_args

from benchmark.cli import build_parser
from benchmark.cli.args import config_from_args
from benchmark.runs.identity import run_name
from benchmark.sweeps.presets import load_preset

ROOT = Path(__file__).resolve().parents[2]


def docs_table1_command() -> list[str]:
    """The `fedbench run` of docs/running.md that says it is a Table 1 cell, as argv."""
    lines = (ROOT / "docs" / "running.md").read_text().splitlines()
    start = next(
        i for i, line in enumerate(lines) if line.startswith("fedbench run --method pfedmma --dataset dtd --seed")
    )
    command = ""
    for line in lines[start:]:
        command += " " + line.split("#")[0].rstrip().removesuffix("\\")
        if not line.split("#")[0].rstrip().endswith("\\"):
            assert "one Table 1 cell" in line  # the line says what the command is
            break
    return shlex.split(command)[1:]


def test_the_docs_table1_run_resolves_to_the_presets_cell(tmp_path):
    argv = docs_table1_command()
    argv[argv.index("--data-root") + 1] = str(tmp_path / "DATA")
    argv[argv.index("--out") + 1] = str(tmp_path / "runs")
    args, extra = build_parser().parse_known_args(argv)
    args.extra = extra
    config = config_from_args(args)
    preset = load_preset("base2novel")
    (cell,) = preset.cells(
        {"data_root": str(tmp_path / "DATA"), "out": str(tmp_path / "runs")},
        seeds=[1],
        datasets=["dtd"],
        methods=["pfedmma"],
    )
    assert run_name(config) == run_name(cell.config)  # the same cell: the same run folder, hash and all


def test_the_run_header_names_backbone_and_weights(fedbench, fake_data_root, tmp_path):
    done = fedbench(*tiny_run_args(fake_data_root, tmp_path / "runs", "--rounds", "1", "--clients", "2"))
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert first == (
        "fedbench run: promptfl on dtd (base2novel, 2-shot, seed 1), backbone fedbench-tiny-vit, "
        "weights none (random initialization)"
    )
    # the suite's small CLIP on a real dataset (DTD's layout) is said, not silent
    assert "warning: backbone fedbench-tiny-vit is the suite's small CLIP" in done.stderr
    assert "--backbone ViT-B-16-quickgelu --pretrained openai" in done.stderr


def test_the_toy_backbone_on_the_toy_world_does_not_warn():
    from benchmark.cli.single_run import toy_backbone_on_real_data
    from benchmark.config import build_config

    assert toy_backbone_on_real_data(build_config({"dataset": "toy"})) == ""
    assert "dtd is real data" in toy_backbone_on_real_data(build_config({"dataset": "dtd"}))
    assert toy_backbone_on_real_data(build_config({"dataset": "dtd", "backbone": "ViT-B-16-quickgelu"})) == ""
