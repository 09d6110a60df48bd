"""A run whose data hold fewer images than its shots says so (issue 50, item 1): named and
recorded by the shots it had, warned, and the classes that fall short counted in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import TINY
from fake_layouts import make_fake_dataset


def _run(fedbench, root: Path, out: Path, *extra):
    return fedbench(
        "run", "--method", "promptfl", "--dataset", "dtd", "--backbone", TINY, "--pretrained", "none",
        "--data-root", root, "--out", out, "--rounds", 1, "--clients", 3, "--batch-size", 8,
        "--wandb", "disabled", *extra,
    )  # fmt: skip


def test_a_run_on_8_images_per_class_is_an_8_shot_run(fedbench, tmp_path):
    make_fake_dataset("dtd", tmp_path / "D", num_classes=6, per_class=8)  # run at the default --shots 16
    done = _run(fedbench, tmp_path / "D", tmp_path / "runs")
    assert done.returncode == 0, done.stderr
    assert "fedbench: warning: --shots 16, but no class of dtd has more than 8 training images" in done.stderr
    assert all(line.startswith("fedbench: ") for line in done.stderr.splitlines() if "warning:" in line)
    assert "named and recorded 8-shot" in done.stderr
    assert "dtd holds 6 of the release's 47 classes" in done.stderr  # said by the run, not only the dry run
    assert "(base2novel, 8-shot, seed 1)" in done.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "_8shot_" in run_dir.name and "16shot" not in run_dir.name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["shots"] == 8 and "few_shot" not in summary  # every class has its 8
    assert "shots: 8" in (run_dir / "config.yaml").read_text()
    # The same cell as --shots 8 says it: a second call with it finds the finished run.
    again = _run(fedbench, tmp_path / "D", tmp_path / "runs", "--shots", 8)
    assert again.returncode == 0 and "skipped:" in again.stdout


def test_classes_with_fewer_images_than_the_shots_are_counted(fedbench, tmp_path):
    fake = make_fake_dataset("dtd", tmp_path / "D", num_classes=6, per_class=6)
    split_file = next(fake.folder.glob("split_zhou_*.json"))
    split = json.loads(split_file.read_text())
    split["train"] = [row for row in split["train"] if row[1] != 0 or row[0].endswith(("0001.jpg", "0002.jpg"))]
    split_file.write_text(json.dumps(split))  # class 0 (a base class) keeps 2 training images, the others 6
    done = _run(fedbench, tmp_path / "D", tmp_path / "runs", "--shots", 4)
    assert done.returncode == 0, done.stderr
    assert "1 trained classes have fewer than 4 training images (the fewest: 2)" in done.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert "_4shot_" in run_dir.name  # the other classes have their 4
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["few_shot"] == {"classes_short": 1, "fewest_images": 2}
