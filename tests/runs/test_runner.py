"""Nothing lost, nothing false: divergence, bad input, signals, W&B without network,
damaged results and output checks (the fault-injection cases of docs/run-folders.md, Reliability)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import TINY, tiny_config
from torch import nn

from benchmark.cli import main
from benchmark.method import FederatedMethod
from benchmark.registry import register_method
from benchmark.runs.identity import cell_hash


@register_method("test_nan_after")
class NanAfter(FederatedMethod):
    """Test-only: zero-shot CLIP plus a trained bias whose loss turns NaN on client 0 from its
    `nan_at_step`-th local optimizer step on (1-based), as a diverging method's would."""

    frozen_image_features = True

    def __init__(self, backbone, nan_at_step: int = 1, lr: float = 0.1) -> None:
        super().__init__(backbone)
        self.save_hyperparameters(ignore=["backbone"])
        self.bias = nn.Parameter(torch.zeros(1))

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx) + self.bias.sum()
        if self.current_client.client_id == 0 and self.trainer.global_step + 1 >= self.hparams.nan_at_step:
            loss = loss * float("nan")
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


TOY = ("--dataset", "toy", "--backbone", "fedbench-toy-vit", "--pretrained", "fedbench-toy-test")


def tiny_flags(data_root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--dataset",
        "dtd",
        "--backbone",
        TINY,
        "--pretrained",
        "none",
        "--data-root",
        str(data_root),
        "--out",
        str(out),
        "--shots",
        "2",
        "--local-epochs",
        "1",
        "--clients",
        "3",
        "--batch-size",
        "8",
        "--wandb",
        "disabled",
        *extra,
    ]


# -- divergence --------------------------------------------------------------------------


def test_divergent_toy_run_exits_nonzero_naming_where_and_writes_nothing(fedbench, toy_test_checkpoint, tmp_path):
    out = tmp_path / "runs"
    done = fedbench(
        "run",
        "--method",
        "pfedmma",
        "--first-block",
        "2",
        "--lr",
        "1e6",
        *TOY,
        "--out",
        out,
        "--clients",
        "4",
        "--shots",
        "2",
        "--rounds",
        "3",
        "--local-epochs",
        "1",
        "--batch-size",
        "8",
        "--wandb",
        "disabled",
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    message = done.stderr
    assert "method 'pfedmma' diverged at round" in message and "client" in message and "lr 1e+06" in message
    assert "no run folder is written" in message
    # No run folder; the failure is recorded beside where it would be (`fedbench runs` lists it as failed).
    left = [p for p in out.iterdir() if not p.name.startswith(".")]
    assert len(left) == 1 and left[0].name.endswith(".failed.json")
    assert "diverged at round" in json.loads(left[0].read_text())["error"]


def test_a_nonfinite_loss_stops_at_its_step(fake_data_root, tmp_path):
    """The loss check names the step; NaN state after training is caught too."""
    from benchmark.errors import DivergenceError
    from benchmark.runs.runner import run_experiment

    config = tiny_config(
        fake_data_root, tmp_path, method="test_nan_after", method_args={"nan_at_step": 2}, local_epochs=3
    )  # one step per epoch here
    with pytest.raises(DivergenceError, match=r"round 1, client 0, step 2 with lr 0.1: the training loss is nan"):
        run_experiment(config, progress=False)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_a_state_is_finite_exactly_when_every_value_is(dtype):
    from benchmark.federation.server import all_finite

    big = torch.finfo(dtype).max
    state = {
        "a": torch.full((1000,), big, dtype=dtype),
        "b": torch.full((3,), -big, dtype=dtype),
        "steps": torch.tensor([7]),
    }
    assert all_finite(state)  # the largest values, many of them: no overflow in the check
    assert all_finite({}) and all_finite({"steps": torch.tensor([1])})
    for bad in (float("nan"), float("inf"), -float("inf")):
        for key in ("a", "b"):
            spoiled = {k: v.clone() for k, v in state.items()}
            spoiled[key][1 if key == "a" else 0] = bad
            assert not all_finite(spoiled), (bad, key)
    both = {"a": torch.tensor([float("inf")], dtype=dtype), "b": torch.tensor([-float("inf")], dtype=dtype)}
    assert not all_finite(both)  # opposite infinities do not cancel


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_nonfinite_hyperparameters_are_refused_before_loading(fedbench, value):
    done = fedbench("run", "--method", "promptfl", f"--lr={value}", "--backbone", "no-such-model")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "hyperparameter 'lr' must be a finite number" in done.stderr


def test_failed_cell_is_shown_as_failed_and_retried(tmp_path, fake_data_root, capsys):
    from test_reproduce import reproduce

    preset = tmp_path / "mini.yaml"
    preset.write_text(
        f"title: Mini\nrun: {{protocol: base2novel, shots: 2, rounds: 1, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {fake_data_root}, wandb: disabled}}\n"
        "datasets: [dtd]\n"
        "methods: [zeroshot, {label: diverges, method: test_nan_after}]\n"
        "seeds: [1, 2]\n"
    )
    assert reproduce(tmp_path, preset) == 1
    out = capsys.readouterr().out
    assert "ran 2 runs, 0 were already done, 0 skipped for missing data, 2 failed" in out
    assert "FAILED test_nan_after_dtd" in out and "diverged" in out
    table = (tmp_path / "results" / "table.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| diverges |"))
    assert row.count("failed") == 4 and not any(ch.isdigit() for ch in row.replace("seeds", ""))
    stats = pd.read_csv(tmp_path / "results" / "table.csv")
    failed = stats[stats.label == "diverges"]
    assert (
        len(failed) == 8 and (failed["failed"] == 2).all() and failed["mean"].isna().all()
    )  # 4 metrics x (dtd, Average)
    runs = tmp_path / "runs"
    assert len(list(runs.glob("test_nan_after_*.failed.json"))) == 2
    assert not [p for p in runs.iterdir() if p.is_dir() and p.name.startswith("test_nan_after")]
    # The next call retries the failed cells, and only them.
    capsys.readouterr()
    assert reproduce(tmp_path, preset) == 1
    again = capsys.readouterr().out
    assert "4 cells: 2 done, 2 to run (2 failed last time: run again)" in again
    assert "ran 0 runs, 2 were already done, 0 skipped for missing data, 2 failed" in again
    assert again.count("FAILED test_nan_after_dtd") == 2


# -- input and configuration -------------------------------------------------------------

YAML_CASES = {
    "rounds: null\n": "rounds = None is invalid: expected int",
    "rounds: true\n": "rounds = True is invalid: expected int",
    "rounds: 2.5\n": "rounds = 2.5 is invalid: expected int",
    "rounds: five\n": "rounds = 'five' is invalid: expected int",
    "rounds: 3\nseed: 1\nrounds: 5\n": "found duplicate key 'rounds'",
    "participation: .nan\n": "participation = nan is invalid: expected a finite number",
    "protocol: dirichlet\nbeta: .inf\n": "beta = inf is invalid: expected a finite number",
    "beta: 0.3\n": "unknown option 'beta': an option of protocol dirichlet, domains, not of base2novel",
    "protocol: dirichlet\nprotocol_args: {beta: 0, min_client_size: 2}\n": "beta = 0 is invalid: expected a finite number > 0",
    "augment: maybe\n": "augment = 'maybe' is invalid: expected bool",
    "rounds: [1, 2]\n": "rounds = [1, 2] is invalid: expected int",
    "- rounds\n": "must hold a mapping of option: value",
    "rounds: 3\n  seed: 2\n": "is not valid YAML",
    "1: 2\n": "option names are text",
    "roundz: 3\n": "unknown option 'roundz' (did you mean 'rounds'?)",
    "method_args: 3\n": "method_args must be a mapping",
    "method: promptfl\nmethod_args: {lr: .nan}\n": "hyperparameter 'lr' must be a finite number",
    "method: promptfl\nmethod_args: {lr: true}\n": "hyperparameter 'lr' expects float",
    "method: promptfl\nmethod_args: {lr: null}\n": "hyperparameter 'lr' expects float",
    "method: promptfl\nmethod_args: {lr: 0.1, lr: 0.2}\n": "found duplicate key 'lr'",
    "class_dealing: round_robin\n": "class_dealing = 'round_robin' is invalid",
    "rounds: 0\n": "rounds = 0 is invalid: expected an integer >= 1",
}


@pytest.mark.parametrize("text", list(YAML_CASES), ids=list(range(len(YAML_CASES))))
def test_malformed_yaml_is_a_clean_error(fedbench, tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    done = fedbench("run", "--config", path, "--backbone", "no-such-model")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("fedbench run: error:")
    assert YAML_CASES[text] in done.stderr


CLI_CASES = [
    (["run", "--round", "3"], "unrecognized arguments --round 3 (--round: did you mean --rounds?)"),  # no abbreviations
    (["run", "--rounds", "three"], "argument --rounds: invalid int value: 'three'"),
    (["run", "--rounds"], "argument --rounds: expected one argument"),
    (["run", "--augment", "perhaps"], "argument --augment: invalid parse_bool value"),
    (["run", "--participation", "nan"], "participation = nan is invalid"),
    (["run", "--lr", "1e999", "--method", "promptfl"], "must be a finite number"),
    (["run", "--n-ct", "4", "--method", "promptfl"], "unrecognized arguments --n-ct 4 (--n-ct: did you mean --n-ctx?)"),
    (["run", "--clients", "0"], "clients = 0 is invalid"),
    (["run", "--config", "/no/such.yaml"], "config file /no/such.yaml does not exist"),
    (["run", "--config", "/"], "config file / is a folder; expected a YAML file, e.g. /config.yaml"),
    (["reproduce", "toy", "--set", "roundz=3", "--dry-run"], "unknown option 'roundz' (did you mean 'rounds'?)"),
    (["reproduce", "toy", "--seed", "1"], "unrecognized arguments: --seed 1 (--seed: did you mean --seeds?)"),
    (["reproduce", "toy", "--rounds", "1"], "unrecognized arguments: --rounds 1\n"),  # nothing close: no guess
    (["reproduce", "toy", "--set", "rounds"], "--set takes OPTION=VALUE"),
    (["reproduce", "toy", "--set", "rounds=null", "--dry-run"], "rounds = 'null' is invalid"),
    (["reproduce", "no_such_table"], "unknown table 'no_such_table'"),
    (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
]


@pytest.mark.parametrize("argv, message", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_malformed_cli_values_are_a_clean_error(argv, message, capsys):
    try:
        code = main([*argv, *(["--backbone", "no-such-model"] if argv[0] == "run" else [])])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and message in err


@pytest.mark.parametrize(
    "text",
    [
        "run: [1]\ndatasets: [dtd]\nmethods: [zeroshot]\nseeds: [1]\n",
        "run: {}\ndatasets: dtd\nmethods: [zeroshot]\nseeds: [1]\n",
        "run: {}\ndatasets: [dtd]\nmethods: [zeroshot]\nseeds: [one]\n",
        "run: {}\ndatasets: [dtd]\nmethods: [{label: x}]\nseeds: [1]\n",
        "run: {rounds: 2}\nrun: {rounds: 3}\ndatasets: [dtd]\nmethods: [zeroshot]\nseeds: [1]\n",
        "run: {rounds: true}\ndatasets: [dtd]\nmethods: [zeroshot]\nseeds: [1]\n",
        "just text\n",
    ],
)
def test_malformed_presets_are_a_clean_error(tmp_path, text, capsys):
    preset = tmp_path / "bad.yaml"
    preset.write_text(text)
    assert main(["reproduce", str(preset), "--dry-run", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedbench reproduce: error:") and "Traceback" not in err


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("titel: Mine\n", "'title'"),
        ("tunned: {values: {}}\n", "'tuned'"),
        ("seed: [1]\n", "'seeds'"),
        ("notes: x\n", None),
    ],
)
def test_an_unknown_preset_key_is_an_error_with_the_closest_key(tmp_path, key, meant, capsys):
    # A typo at the top level left the intended title or tuned values silently unused.
    preset = tmp_path / "typo.yaml"
    preset.write_text(key + "run: {}\ndatasets: [dtd]\nmethods: [zeroshot]\nseeds: [1]\n")
    assert main(["reproduce", str(preset), "--dry-run", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"fedbench reproduce: error: preset {preset}: unknown key {key.split(':')[0]!r}")
    assert (f"(did you mean {meant}?)" in err) if meant else "did you mean" not in err
    assert "a preset holds title, paper_table, run, datasets, methods, seeds, grid, targets, tuned" in err


def test_every_client_count_deals_balanced_or_is_refused_with_the_range():
    from data.partition import deal_classes, valid_client_counts

    for n_base in (6, 16, 24):
        base = list(range(n_base))
        for clients in range(1, n_base + 1):
            dealt = deal_classes(base, clients)
            sizes = [len(group) for group in dealt]
            assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
            assert sorted(c for group in dealt for c in group) == base
        with pytest.raises(ValueError, match=rf"use --clients 1-{n_base}$"):
            deal_classes(base, n_base + 1)
    # The authors' rule (the paper presets) refuses the counts it cannot serve, naming those it can.
    assert valid_client_counts(16, "authors") == [*range(1, 9), *range(11, 17)]
    with pytest.raises(ValueError, match=r"use --clients 1-8, 11-16 or class_dealing: balanced"):
        deal_classes(list(range(16)), 9, rule="authors")


def test_impossible_clients_is_a_clean_cli_error(fedbench, fake_data_root, tmp_path):
    done = fedbench("run", "--method", "zeroshot", *tiny_flags(fake_data_root, tmp_path / "runs", "--clients", "7"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot deal 6 base classes to 7 clients" in done.stderr and "--clients 1-6" in done.stderr


def test_bad_output_location_is_refused_before_any_model(fedbench, fake_data_root, tmp_path, monkeypatch):
    import benchmark.runs.preparation as preparation

    def never(*args, **kwargs):
        raise AssertionError("a model was built before the output location was checked")

    monkeypatch.setattr(preparation, "load_backbone", never)
    a_file = tmp_path / "file"
    a_file.write_text("")
    done = fedbench("run", "--method", "zeroshot", *tiny_flags(fake_data_root, a_file))
    assert done.returncode == 2 and "is a file, not a folder" in done.stderr
    done = fedbench("run", "--method", "zeroshot", *tiny_flags(fake_data_root, a_file / "below"))
    assert done.returncode == 2 and f"lies under the file {a_file}" in done.stderr
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        done = fedbench("run", "--method", "zeroshot", *tiny_flags(fake_data_root, locked / "runs"))
        assert done.returncode == 2 and "cannot be written" in done.stderr
    import benchmark.runs.results as results

    monkeypatch.setattr(results, "RUN_FOLDER_BYTES", 2**62)
    done = fedbench("run", "--method", "zeroshot", *tiny_flags(fake_data_root, tmp_path / "runs"))
    assert done.returncode == 2 and "MiB free" in done.stderr


def test_run_folders_follow_the_umask_and_damaged_summaries_count_missing(fake_data_root, tmp_path):
    from benchmark.runs.results import is_complete, read_summary
    from benchmark.runs.runner import run_experiment

    previous = os.umask(0o022)
    try:
        result = run_experiment(tiny_config(fake_data_root, tmp_path, method="zeroshot"), progress=False)
    finally:
        os.umask(previous)
    assert result.run_dir.stat().st_mode & 0o777 == 0o755
    summary = result.run_dir / "summary.json"
    assert is_complete(result.run_dir)
    for damage in ("{not json", '{"metrics": {"HM": "high"}}', '{"method": "zeroshot"}', "[]"):
        summary.write_text(damage)
        with pytest.warns(UserWarning, match=rf"{summary} is damaged.*counts as missing"):
            assert not is_complete(result.run_dir)
        warnings.resetwarnings()
    with pytest.warns(UserWarning, match="is damaged"):
        assert read_summary(result.run_dir) is None


# -- signals -----------------------------------------------------------------------------


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_end_a_run_with_their_exit_code_and_no_run_folder(fake_data_root, tmp_path, signum, code):
    """Stopped after round 10 of 100, the run keeps its last completed round and says so: the
    round its checkpoint holds and the round the same command resumes from. Its stderr is a
    file: the progress bar writes plain lines there, no carriage returns or escape codes."""
    from benchmark.runs.checkpoints import read_sidecar

    out = tmp_path / "runs"
    log = tmp_path / "stderr.txt"
    command = [
        sys.executable,
        "-m",
        "benchmark.cli",
        "run",
        "--method",
        "promptfl",
        *tiny_flags(fake_data_root, out, "--rounds", "100"),
    ]
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.time() + 300
        while time.time() < deadline and "10/100 rounds" not in log.read_text():  # a tenth of the rounds done
            time.sleep(0.2)
        assert "10/100 rounds" in log.read_text(), log.read_text()
        process.send_signal(signum)
        process.wait(timeout=120)
    text = log.read_text()
    assert process.returncode == code, text
    assert f"stopped by {signal.Signals(signum).name}" in text and "Traceback" not in text
    assert "\r" not in text and "\x1b" not in text
    assert not out.exists() or not [p for p in out.iterdir() if not p.name.startswith(".")]
    (sidecar,) = out.glob(".*.checkpoint.json")
    run_dir = out / sidecar.name[1 : -len(".checkpoint.json")]
    kept = read_sidecar(run_dir)["round"]
    assert 10 <= kept < 100
    assert f"{run_dir.name}: a round checkpoint was written after round {kept}" in text
    assert f"the same command resumes it from round {kept + 1}" in text


# -- W&B without a network ---------------------------------------------------------------


def test_wandb_without_network_falls_back_to_offline_once(fake_data_root, tmp_path, monkeypatch):
    import benchmark.runs.tracking as tracking

    with socket.socket() as probe:  # a local port nothing listens on: connections are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "f" * 40)
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv(tracking.INIT_TIMEOUT_ENV, "3")
    monkeypatch.setattr(tracking, "_server_unreachable", False)
    config = tiny_config(fake_data_root, tmp_path, method="zeroshot", wandb="online")
    started = time.perf_counter()
    with pytest.warns(UserWarning, match=r"W&B did not answer within 3 s.*log offline") as record:
        with tracking.Tracker.for_run(config) as tracker:
            assert tracker.run is not None and tracker.run.settings.mode == "offline"
            tracker.run.log({"x": 1})
    first = time.perf_counter() - started
    assert len([w for w in record if "W&B" in str(w.message)]) == 1
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second run goes offline at once, without a warning
        with tracking.Tracker.for_run(config) as tracker:
            assert tracker.run.settings.mode == "offline"
    second = time.perf_counter() - started
    print(f"first run: {first:.1f} s to fall back, second: {second:.1f} s")
    assert len(list((tmp_path / "runs" / "wandb").glob("offline-run-*"))) == 2
    # W&B's own wait was 90 s per run; ours is the 3 s timeout plus start-up, once per process.
    assert first < 90


# -- concurrent sweeps -------------------------------------------------------------------


def test_a_held_cell_lock_names_its_holder_and_a_dead_holders_lock_is_taken(tmp_path):
    from benchmark.errors import CellBusy
    from benchmark.files import file_lock
    from benchmark.runs.locks import cell_lock, lock_path

    cell = tmp_path / "runs" / "promptfl_dtd_seed1_abc"
    path = lock_path(cell)
    path.parent.mkdir(parents=True)
    assert path.parent == cell.parent and path.name.startswith(".")
    # Another holder: an open file description with the flock taken (as another process has).
    path.write_text(json.dumps({"pid": 4242, "host": "node7", "started": "2026-01-01 00:00:00"}))
    with file_lock(path):
        with pytest.raises(CellBusy, match=r"being run by pid 4242 on node7 \(since 2026-01-01 00:00:00\)"):
            with cell_lock(cell):
                pass
    # The holder died (its flock went with it) but its file stayed: the lock is stale and taken.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path.write_text(json.dumps({"pid": int(dead.stdout), "host": "here", "started": "then"}))
    with cell_lock(cell):
        holder = json.loads(path.read_text())
        assert holder["pid"] == os.getpid()
        with cell_lock(cell):  # re-entrant in one process (reproduce locks, then its run does)
            pass
        assert path.exists()
    assert not path.exists()


COUNTING_PLUGIN = '''
import json
import os
import torch
from benchmark.method import FederatedMethod
from benchmark.registry import register_method


@register_method("counted")
class Counted(FederatedMethod):
    """Zero-shot CLIP plus a trained bias; every build (one per cell run) is appended to a file."""

    frozen_image_features = True

    def __init__(self, backbone, lr: float = 0.01) -> None:
        super().__init__(backbone)
        self.bias = torch.nn.Parameter(torch.zeros(1))
        with open(os.environ["COUNT_FILE"], "a") as f:
            f.write(f"{os.getpid()}\\n")

    def training_step(self, batch, batch_idx):
        return super().training_step(batch, batch_idx) + self.bias.sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
'''


def test_two_concurrent_sweeps_run_each_cell_exactly_once(tmp_path, fake_data_root):
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "counted.py").write_text(COUNTING_PLUGIN)
    preset = tmp_path / "mini.yaml"
    preset.write_text(
        f"title: Mini\nrun: {{protocol: base2novel, shots: 2, rounds: 2, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {fake_data_root}, wandb: disabled}}\n"
        "datasets: [dtd]\nmethods: [counted]\nseeds: [1, 2, 3, 4, 5, 6]\n"
    )
    env = {
        **os.environ,
        "COUNT_FILE": str(tmp_path / "starts.txt"),
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "plugin"), os.environ.get("PYTHONPATH", "")]),
    }
    code = (
        f"import sys, counted; from benchmark.cli import main; sys.exit(main(['reproduce', {str(preset)!r}, "
        f"'--out', {str(tmp_path / 'runs')!r}, '--results', sys.argv[1]]))"
    )
    sweeps = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path / f"results{i}")],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=900) for p in sweeps]
    for process, (out, err) in zip(sweeps, outputs):
        assert process.returncode == 0, err
        assert "FileNotFoundError" not in err and "Traceback" not in err
    starts = (tmp_path / "starts.txt").read_text().split()
    assert len(starts) == 6, outputs  # six cells, six training starts in all
    ran = [int(out.split("ran ")[1].split()[0]) for out, _ in outputs]
    assert sum(ran) == 6
    runs = tmp_path / "runs"
    assert len([p for p in runs.iterdir() if p.name.startswith("counted_")]) == 6
    assert not list(runs.glob(".*.partial")) and not list(runs.glob(".*.lock"))
    print(f"cells run by each sweep: {ran}")


# -- determinism under data-loader workers -----------------------------------------------


def test_augmented_training_gives_the_same_numbers_with_0_and_2_workers(fake_data_root, tmp_path):
    from benchmark.runs.runner import run_experiment

    def run(workers: int):
        config = tiny_config(
            fake_data_root,
            tmp_path,
            method="promptfl",
            augment=True,
            num_workers=workers,
            local_epochs=2,
            rounds=2,
            method_args={"lr": 0.05},
        )
        return config, run_experiment(config, write=False, progress=False)

    (config0, serial), (config2, parallel) = run(0), run(2)
    assert [r.train_loss for r in serial.federation.rounds] == [r.train_loss for r in parallel.federation.rounds]
    assert serial.summary["metrics"] == parallel.summary["metrics"]
    for cid, state in serial.federation.client_states.items():
        for key, value in state.items():
            assert torch.equal(value, parallel.federation.client_states[cid][key]), (cid, key)
    assert cell_hash(config0) == cell_hash(config2)  # so the worker layout may stay out of the cell's identity


def test_augmentation_differs_between_epochs_and_clients_but_not_between_loads(fake_data_root):
    from benchmark.federation.client_batches import ClientTrainSet
    from data.catalog import load_dataset
    from data.partition import ClientShard
    from data.transforms import clip_transforms

    splits = load_dataset("dtd", fake_data_root, clip_transforms(32, augment=True))
    shard = ClientShard(0, (0, 1, 2), (0,), label_space=(0,))
    labels = [0] * len(splits.train.labels)
    a, b = ClientTrainSet(splits.train, labels, shard, seed=1), ClientTrainSet(splits.train, labels, shard, seed=2)
    torch.manual_seed(0)
    first = a[(0, 1)][0]
    torch.manual_seed(123)  # the global RNG state of the loading process does not matter
    assert torch.equal(first, a[(0, 1)][0])
    assert not torch.equal(first, a[(1, 1)][0]) and not torch.equal(first, b[(0, 1)][0])


def test_sigterm_stops_reproduce_with_143_listing_the_finished_cells(fake_data_root, tmp_path):
    preset = tmp_path / "mini.yaml"
    preset.write_text(
        f"title: Mini\nrun: {{protocol: base2novel, shots: 2, local_epochs: 1, clients: 3, batch_size: 8,"
        f" backbone: {TINY}, pretrained: none, data_root: {fake_data_root}, wandb: disabled}}\n"
        "datasets: [dtd]\nmethods: [promptfl]\nseeds: [1]\ngrid: {rounds: [1, 500]}\n"
    )
    runs = tmp_path / "runs"
    command = [
        sys.executable,
        "-m",
        "benchmark.cli",
        "reproduce",
        str(preset),
        "--out",
        str(runs),
        "--results",
        str(tmp_path / "results"),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and not list(runs.glob("promptfl_*/summary.json")):
        time.sleep(0.2)
    (finished,) = [p.parent.name for p in runs.glob("promptfl_*/summary.json")]
    time.sleep(2.0)  # into the 500-round cell
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    assert f"finished {finished}" in out and "finished in this call: 1" in out
    assert "stopped by SIGTERM" in err and "Traceback" not in err
    assert [p.name for p in runs.iterdir() if p.is_dir()] == [finished]


def test_an_unknown_pretrained_name_lists_the_suites_weights_too(fedbench, tmp_path):
    """Issue 38: `--pretrained nosuch` on the toy backbone said its tags were "none", though
    `fedbench-toy` (the default) is weights it takes."""
    done = fedbench("run", "--pretrained", "nosuch", "--rounds", "1", "--out", tmp_path, "--wandb", "disabled")
    assert done.returncode == 2
    assert done.stderr.startswith(
        "fedbench run: error: backbone 'fedbench-toy-vit' has no pretrained weights 'nosuch'. open_clip has no tags "
        "for it; the suite's weights fedbench-toy"
    )
    assert "Its tags: none" not in done.stderr and len(done.stderr.splitlines()) == 1
