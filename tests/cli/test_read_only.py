"""Commands that only read leave the data root and the runs folder byte for byte as they were
(issue 50, item 2): `fedbench datasets` and `fedbench partition` make DomainBed's missing
splits in memory, a refused `fedbench evaluate` writes no failure record, and the split a
run does write is announced in one line."""

from __future__ import annotations

from pathlib import Path

from conftest import TINY, run_tiny_cell
from fake_layouts import make_fake_dataset


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _data_root(tmp_path: Path) -> Path:
    root = tmp_path / "D"
    make_fake_dataset("dtd", root, num_classes=6, per_class=8)
    make_fake_dataset("pacs", root, num_classes=3, layout="DomainBed")  # PACS/, no split files
    return root


def test_datasets_and_partition_write_nothing_into_the_data_root(fedbench, tmp_path):
    root = _data_root(tmp_path)
    before = snapshot(root)
    done = fedbench("datasets", "--data-root", root)
    assert done.returncode == 0, done.stderr
    (pacs,) = [line for line in done.stdout.splitlines() if line.split()[:1] == ["pacs"]]
    assert "found" in pacs and "no split yet (a run writes split_pacs_<domain>.json)" in pacs
    assert "Warning" not in done.stderr
    done = fedbench("partition", "pacs", "--protocol", "domains", "--clients", 4, "--data-root", root)
    assert done.returncode == 0, done.stderr
    assert snapshot(root) == before  # no split_pacs_*.json written


def test_a_run_says_the_split_it_writes_in_one_line(fedbench, tmp_path):
    root = _data_root(tmp_path)
    done = fedbench(
        "run", "--method", "zeroshot", "--dataset", "pacs", "--protocol", "domains", "--clients", 4,
        "--backbone", TINY, "--pretrained", "none", "--data-root", root, "--out", tmp_path / "runs",
        "--rounds", 1, "--wandb", "disabled",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "no published split" in line]
    assert line.startswith("fedbench: warning: pacs: no published split") and "UserWarning" not in done.stderr
    assert f"wrote {root / 'PACS' / 'split_pacs_artpainting.json'}" in line
    assert sorted(p.name for p in (root / "PACS").glob("split_*.json")) == [
        "split_pacs_artpainting.json", "split_pacs_cartoon.json", "split_pacs_photo.json", "split_pacs_sketch.json",
    ]  # fmt: skip


def test_a_refused_evaluate_leaves_the_runs_folder_as_it_was(fedbench, fake_data_root, tmp_path):
    runs = tmp_path / "runs"
    run_tiny_cell(fedbench, "promptfl", fake_data_root, runs)
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    (run_dir / "clients.pt").unlink()
    before = snapshot(runs)
    done = fedbench("evaluate", run_dir)
    assert done.returncode == 2 and "holds no clients.pt" in done.stderr and "Traceback" not in done.stderr
    assert snapshot(runs) == before  # no ..._evaluated_... folder, no .failed.json
    listed = fedbench("runs", runs)
    assert listed.returncode == 0 and "1 finished" in listed.stdout and "failed" not in listed.stdout


def test_a_missing_data_root_is_an_error(fedbench, tmp_path):
    done = fedbench("datasets", "--data-root", tmp_path / "nowhere")
    assert done.returncode == 2 and f"--data-root {tmp_path / 'nowhere'}: does not exist" in done.stderr
    assert not (tmp_path / "nowhere").exists()


def test_runs_on_a_folder_that_does_not_exist_answers_before_torch_loads(tmp_path):
    """Issue 50, item 10: `fedbench runs /nowhere` took 7 s (pandas and torch) to say no."""
    import subprocess
    import sys

    code = (
        "import sys; from benchmark.cli import main; rc = main(['runs', sys.argv[1]]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nowhere")], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert f"{tmp_path / 'nowhere'} is not a folder" in done.stderr


def test_flower_refuses_a_finetuned_run_before_torch_loads(tmp_path):
    """Issue 50, item 10: the refusal of `fedbench flower --federation local` came after 8 s
    (local now runs on Flower; +FT is what it refuses)."""
    import subprocess
    import sys

    code = (
        "import sys; from benchmark.cli import main; "
        "rc = main(['flower', '--method', 'promptfl', '--finetune-epochs', '1', '--out', sys.argv[1]]); "
        "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs")], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "run in process only" in done.stderr and not (tmp_path / "runs").exists()
