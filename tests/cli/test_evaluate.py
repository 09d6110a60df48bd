"""`fedbench evaluate RUN_DIR`: a finished run's saved clients (clients.pt) scored again without
training -- the run's own final metrics exactly -- or on another dataset, into a new run
folder whose identity names the source run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

TOY_RUN = [
    "run", "--method", "promptfl", "--dataset", "toy", "--backbone", "fedbench-toy-vit",
    "--pretrained", "fedbench-toy-test", "--rounds", "2", "--clients", "2", "--shots", "2",
    "--batch-size", "8", "--wandb", "disabled",
]  # fmt: skip


def finished(out: Path) -> dict[str, Path]:
    return {p.parent.name: p.parent for p in out.rglob("summary.json")}


def final_rows(run_dir: Path) -> pd.DataFrame:
    rows = pd.read_csv(run_dir / "metrics.csv")
    rows = rows[rows["metric"].isin(["Local", "Base", "Novel", "HM"]) & (rows["round"] == rows["round"].max())]
    return rows.sort_values(["client", "metric"]).reset_index(drop=True)


def test_evaluate_gives_the_runs_own_metrics_and_another_datasets(fedbench, toy_test_checkpoint, tmp_path):
    out = tmp_path / "runs"
    assert fedbench(*TOY_RUN, "--out", out).returncode == 0
    (source,) = finished(out).values()
    assert (source / "clients.pt").is_file()

    done = fedbench("evaluate", source)
    assert done.returncode == 0, done.stderr
    (again,) = [d for name, d in finished(out).items() if name != source.name]
    assert "_evaluated_" in again.name
    summaries = [json.loads((d / "summary.json").read_text()) for d in (source, again)]
    assert summaries[1]["metrics"] == summaries[0]["metrics"]  # exactly: the same states, scored again
    pd.testing.assert_frame_equal(final_rows(source), final_rows(again))
    assert summaries[1]["evaluated_from"] == source.name and summaries[1]["bytes_up_total"] == 0
    identity = yaml.safe_load((again / "config.yaml").read_text())["identity"]
    assert identity["source_run"] == source.name

    done = fedbench("evaluate", source, "--dataset", "toy_shapes")
    assert done.returncode == 0, done.stderr
    (other,) = [d for name, d in finished(out).items() if name not in (source.name, again.name)]
    summary = json.loads((other / "summary.json").read_text())
    assert summary["dataset"] == "toy_shapes" and set(summary["metrics"]) == {"Local", "Base", "Novel", "HM"}
    assert summary["metrics"] != summaries[0]["metrics"]

    # another protocol takes its own options, not the source run's (base2novel's class_dealing)
    done = fedbench("evaluate", source, "--protocol", "dirichlet")
    assert done.returncode == 0, done.stderr
    (scored,) = [d for d in finished(out).values() if "_dirichlet_" in d.name]
    summary = json.loads((scored / "summary.json").read_text())
    assert summary["protocol"] == "dirichlet" and set(summary["metrics"]) == {"Acc"}

    # ... and its options are flags of evaluate too (issue 50, item 5: "unrecognized arguments: --beta")
    done = fedbench("evaluate", source, "--protocol", "dirichlet", "--beta", "0.3")
    assert done.returncode == 0, done.stderr
    (beta,) = [d for d in finished(out).values() if "_dirichlet_" in d.name and d != scored]
    assert yaml.safe_load((beta / "config.yaml").read_text())["protocol_args"]["beta"] == 0.3
    done = fedbench("evaluate", source, "--protocol", "dirichlet", "--beta", "0.5")  # the default: the cell above
    assert done.returncode == 0 and "skipped:" in done.stdout and str(scored) in done.stdout
    done = fedbench("evaluate", source, "--protocol", "dirichlet", "--beta", "0")
    assert done.returncode == 2 and "beta" in done.stderr and "Traceback" not in done.stderr
    assert "--clients" not in done.stderr  # evaluate has no --clients to point to


def test_evaluate_refuses_a_folder_that_is_no_finished_run(fedbench, tmp_path):
    done = fedbench("evaluate", tmp_path)
    assert done.returncode == 2
    assert f"{tmp_path} is not a finished run folder" in done.stderr and "Traceback" not in done.stderr


def test_evaluate_names_a_truncated_or_damaged_clients_file(fedbench, toy_test_checkpoint, tmp_path):
    # It was torch's own traceback ("PytorchStreamReader failed reading zip archive"), exit 1.
    import shutil
    import zipfile

    out = tmp_path / "runs"
    assert fedbench(*TOY_RUN, "--rounds", "1", "--out", out).returncode == 0
    (source,) = finished(out).values()
    clients = source / "clients.pt"
    damaged = tmp_path / "damaged" / source.name
    shutil.copytree(source, damaged)
    clients.write_bytes(clients.read_bytes()[: clients.stat().st_size // 2])  # cut short, as by a full disk
    with zipfile.ZipFile(damaged / "clients.pt", "w") as archive:  # a whole zip, but not what torch.save wrote
        archive.writestr("clients/data.pkl", b"not a pickle")
    for folder, why in ((source, "it is not a whole zip archive"), (damaged, "")):
        done = fedbench("evaluate", folder)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"fedbench evaluate: error: {folder / 'clients.pt'} cannot be read ({why}")
        assert "it is truncated or damaged" in done.stderr and "with --force" in done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
    for folder in (source, damaged):  # refused before a run folder was written
        assert not list((folder.parent / "evaluated").glob("*/summary.json"))
