"""The dry run says "present" only when a run would start, and what a preset costs (issue 35, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_mini_preset, write_split_zhou

from benchmark.cli import main


def dry_run(capsys, tmp_path: Path, preset: Path, *extra: str) -> str:
    capsys.readouterr()
    code = main(["reproduce", str(preset), "--dry-run", "--out", str(tmp_path / "runs"), *extra])
    out = capsys.readouterr().out
    assert code == 0
    return out


def section_line(out: str, dataset: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(dataset) and "done" in line)


def test_a_complete_dataset_is_present(capsys, tmp_path):
    root = write_split_zhou(tmp_path / "data", num_classes=47, train_per_class=1, test_per_class=1)
    out = dry_run(capsys, tmp_path, write_mini_preset(tmp_path, root))
    assert section_line(out, "dtd").endswith("data present")


def test_an_empty_dataset_folder_is_not_ready(capsys, tmp_path):
    (tmp_path / "data" / "dtd").mkdir(parents=True)
    out = dry_run(capsys, tmp_path, write_mini_preset(tmp_path, tmp_path / "data"))
    assert "data NOT READY dtd" in section_line(out, "dtd")
    assert "dataset not ready dtd: dtd: split file" in out and "split_zhou_DescribableTextures.json" in out


def test_a_truncated_dataset_is_not_ready_for_the_paper_table(capsys, tmp_path, fake_data_root):
    out = dry_run(capsys, tmp_path, write_mini_preset(tmp_path, fake_data_root))
    line = section_line(out, "dtd")
    assert "present" not in line and "NOT READY for the paper's table: dtd: 12 of the release's 47 classes" in line
    assert "partial dataset dtd: 12 of the release's 47 classes" in out


def _fedmvp_preset(folder: Path, data_root: Path, attributes: Path) -> Path:
    preset = folder / "mvp.yaml"
    preset.write_text(
        "title: Mini FedMVP table\n"
        "run: {protocol: base2novel, shots: 2, rounds: 1, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: fedbench-tiny-vit, pretrained: none, data_root: {data_root}, attributes: {attributes},"
        " wandb: disabled}\n"
        "datasets: [dtd]\nmethods: [zeroshot, fedmvp]\nseeds: [1]\n"
    )
    return preset


def test_a_missing_attribute_file_is_not_ready(capsys, tmp_path, fake_data_root):
    preset = _fedmvp_preset(tmp_path, fake_data_root, tmp_path / "attributes")
    out = dry_run(capsys, tmp_path, preset, "--cells")
    assert "NOT READY for 1 cells" in section_line(out, "dtd")
    assert "1 of the 2 cells to run cannot start:\n  1 cells lack another input" in out
    cells = [line for line in out.splitlines() if " | dtd | " in line]
    assert any(line.startswith("  fedmvp") and "cannot start: no attribute file" in line for line in cells)
    assert any(line.startswith("  zeroshot") and line.endswith("to run") for line in cells)
    assert "cells that cannot start: no attribute file for dataset 'dtd'" in out
    # A real reproduce skips the cell with the same reason instead of failing 30 s in.
    capsys.readouterr()
    code = main(["reproduce", str(preset), "--out", str(tmp_path / "runs"), "--results", str(tmp_path / "res")])
    err = capsys.readouterr().err
    assert code == 1 and "skipped because their data is missing or not ready (no attribute file" in err
    # With the file, the cell is ready.
    (tmp_path / "attributes").mkdir()
    (tmp_path / "attributes" / "dtd.json").write_text(
        json.dumps({f"texture {chr(ord('a') + i)}": ["colour", "pattern"] for i in range(12)})
    )
    out = dry_run(capsys, tmp_path, preset)
    assert "cannot start" not in out


def test_the_dry_run_prints_a_flop_and_gpu_hour_line(capsys, tmp_path, fake_data_root, monkeypatch):
    from benchmark.sweeps import gpu_rate

    monkeypatch.setattr(gpu_rate, "GPU_REPORT", tmp_path / "results" / "gpu.md")  # none measured yet
    preset = write_mini_preset(tmp_path, fake_data_root, rounds=1)
    out = dry_run(capsys, tmp_path, preset)
    assert "cost estimate for 2 cells: " in out and "GPU-hours at a sustained 100 TFLOP/s (assumed: " in out
    assumed = next(line for line in out.splitlines() if line.startswith("cost estimate"))
    # scripts/gpu_check.sh wrote a report: the line uses its rate and names it.
    gpu_rate.GPU_REPORT.parent.mkdir()
    gpu_rate.GPU_REPORT.write_text("# GPU\n\n" + gpu_rate.rate_comment(25.0, "NVIDIA H200", "2026-12-05") + "\n")
    out = dry_run(capsys, tmp_path, preset)
    measured = next(line for line in out.splitlines() if line.startswith("cost estimate"))
    assert "GPU-hours at the measured 25 TFLOP/s (NVIDIA H200, 2026-12-05, " in measured and "assumed" not in measured
    hours = [float(line.split("), ")[-1].split(" GPU-hours")[0]) for line in (assumed, measured)]
    assert hours[1] == pytest.approx(4 * hours[0], rel=0.05)  # a quarter of the rate: four times the hours


def test_the_estimate_follows_the_schedule(fake_data_root):
    """Twice the rounds: twice the training work and the same single evaluation (zero-shot: no training)."""
    from benchmark.config import build_config
    from benchmark.sweeps.cost import cell_flops, tower_flops

    towers = tower_flops("fedbench-tiny-vit")
    assert towers.image > 0 and towers.text > 0

    def flops(method: str, rounds: int) -> float:
        run = dict(dataset="dtd", backbone="fedbench-tiny-vit", data_root=str(fake_data_root), shots=2)
        config = build_config({**run, "method": method, "rounds": rounds, "eval_every": rounds}, {})
        return cell_flops(config, towers, {"dtd": (24, 36)}, trains=method != "zeroshot")

    evaluation = towers.image * 36
    assert flops("zeroshot", 1) == pytest.approx(evaluation) == flops("zeroshot", 2)
    assert flops("promptfl", 2) - evaluation == pytest.approx(2 * (flops("promptfl", 1) - evaluation))


@pytest.mark.slow
def test_every_preset_has_a_cost_line(capsys, tmp_path):
    """Every shipped preset, on an empty data root: the counted towers of ViT-B/16 and -B/32."""
    from benchmark.sweeps.presets import available_presets

    for name in available_presets():
        out = dry_run(capsys, tmp_path, Path(name), "--data-root", str(tmp_path / "empty"))
        line = next(line for line in out.splitlines() if line.startswith("cost estimate for "))
        assert "FLOP" in line and "GPU-hours at " in line, (name, line)
        # FedBN's DomainNet and Office-Caltech10 splits have no published size: counted from the data only.
        assert ("not counted" in line) == (name == "featureshift"), (name, line)


def test_image_counts_come_from_the_data_when_it_is_there(capsys, tmp_path):
    """FedBN's 10-class DomainNet has no known release size: counted once its split files are there."""
    from fake_layouts import make_fake_dataset

    make_fake_dataset("domainnet", tmp_path / "data")
    preset = tmp_path / "fs.yaml"
    preset.write_text(
        "title: Mini feature shift\n"
        "run: {protocol: domains, shots: 0, rounds: 1, local_epochs: 1, clients: 6, batch_size: 8,"
        f" backbone: fedbench-tiny-vit, pretrained: none, data_root: {tmp_path / 'data'}, wandb: disabled}}\n"
        "datasets: [domainnet]\nmethods: [zeroshot]\nseeds: [1]\n"
    )
    out = dry_run(capsys, tmp_path, preset)
    line = next(line for line in out.splitlines() if line.startswith("cost estimate for "))
    assert "not counted" not in line and "cost estimate for 1 cells: " in line
    out = dry_run(capsys, tmp_path, preset, "--data-root", str(tmp_path / "nothing"))
    assert "1 cells not counted (domainnet: their image counts are known only with the data present)" in out
