"""The small frictions of a first hour (issue 27, item 11): progress output in logs and
--quiet, listings without torch, misspelt flags, what a stopped run left, unwritable --out."""

from __future__ import annotations

import errno
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_run_args

from benchmark import progress
from benchmark.errors import RunInterrupted


def tiny_run(data_root: Path, out: Path, *extra: str) -> list[str]:
    return tiny_run_args(data_root, out, "--clients", "3", *extra)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


# -- progress output ---------------------------------------------------------------------


def test_a_redirected_bar_prints_a_plain_line_per_tenth(monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    stream = io.StringIO()
    bar = progress.progress_bar(total=20, desc="demo", unit="rounds", stream=stream)
    for _ in range(20):
        bar.update()
    bar.close()
    text = stream.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    # the start, then rounds 2, 4, ..., 20: one line per tenth, none repeated at close
    assert [line.split(",")[0] for line in lines] == [
        "demo: 0/20 rounds (0%)",
        *(f"demo: {n}/20 rounds ({5 * n}%)" for n in range(2, 21, 2)),
    ]


def test_a_stopped_bar_says_where_and_a_nested_bar_only_when_slow(monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    stream = io.StringIO()
    bar = progress.progress_bar(total=100, unit="rounds", initial=30, stream=stream)  # resumed after round 30
    bar.update(3)
    bar.close()
    assert [line.split(" (")[0] for line in stream.getvalue().splitlines()] == ["30/100 rounds", "33/100 rounds"]

    stream = io.StringIO()
    for _ in progress.progress_bar(range(50), desc="features", unit="batches", nested=True, stream=stream):
        pass
    assert stream.getvalue() == ""  # a short inner loop leaves nothing in the log
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)  # as if each batch took longer than LINE_SECONDS
    for _ in progress.progress_bar(range(3), desc="features", unit="batches", nested=True, stream=stream):
        pass
    assert [line.split(" (")[0] for line in stream.getvalue().splitlines()] == [
        "features: 1/3 batches",
        "features: 2/3 batches",
        "features: 3/3 batches",
    ]


def test_a_slow_step_still_gets_a_line_every_line_seconds(monkeypatch):
    """Issue 38: `reproduce` with its output in a file printed nothing for 185 s while one cell
    ran (its bar moves once per cell). A bar whose step outlasts LINE_SECONDS still prints a
    line every LINE_SECONDS (here 0.2 s) saying where it is and what runs; none after close."""
    import time

    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.2)
    stream = io.StringIO()
    bar = progress.progress_bar(total=3, desc="reproduce mini", unit="cells", stream=stream)
    bar.set_postfix_str("promptfl / dtd / seed 1")
    time.sleep(1.1)  # the slow fake step: one cell, 5.5 LINE_SECONDS long
    bar.update()
    bar.close()
    time.sleep(0.5)  # the heartbeat has stopped
    lines = stream.getvalue().splitlines()
    beats = [line for line in lines if line.startswith("reproduce mini: 0/3 cells (0%)") and "promptfl / dtd" in line]
    assert 4 <= len(beats) <= 6, lines  # about one per 0.2 s of the 1.1 s step
    assert lines[-1].startswith("reproduce mini: 1/3 cells (33%)")  # the last line says where it stopped
    seconds = [int(line.split(", ")[1].split("s")[0]) for line in lines]
    assert seconds == sorted(seconds)


def test_a_nested_bar_that_printed_says_where_it_ended(monkeypatch):
    """The last evaluation line read '1/2 clients (50%)' although the run had finished: a nested
    bar that printed a timed line prints its last one too."""
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    stream = io.StringIO()
    bar = progress.progress_bar(total=2, desc="evaluating clients", unit="clients", nested=True, stream=stream)
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)  # the first client was slow
    bar.update()
    monkeypatch.setattr(progress, "LINE_SECONDS", 30.0)  # the second was not
    bar.update()
    bar.close()
    assert [line.split(",")[0] for line in stream.getvalue().splitlines()] == [
        "evaluating clients: 1/2 clients (50%)",
        "evaluating clients: 2/2 clients (100%)",
    ]


def test_a_terminal_gets_tqdm_and_quiet_silences_every_bar(monkeypatch):
    from tqdm.auto import tqdm

    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    terminal = Terminal()
    bar = progress.progress_bar(total=3, unit="rounds", stream=terminal)
    assert isinstance(bar, tqdm)
    bar.close()
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    for stream in (Terminal(), io.StringIO()):
        bar = progress.progress_bar(total=3, unit="rounds", stream=stream)
        bar.update(3)
        bar.close()
        assert stream.getvalue() == ""


def test_run_prints_round_lines_to_a_file_and_none_with_quiet(fedbench, fake_data_root, tmp_path, monkeypatch):
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    done = fedbench(*tiny_run(fake_data_root, tmp_path / "a", "--rounds", "2"))
    assert done.returncode == 0, done.stderr
    assert "2/2 rounds (100%)" in done.stderr and "\r" not in done.stderr  # captured: not a terminal
    done = fedbench(*tiny_run(fake_data_root, tmp_path / "b", "--rounds", "2", "--quiet"))
    assert done.returncode == 0, done.stderr
    assert "rounds" not in done.stderr and "| promptfl" in done.stdout  # the table still prints
    assert progress.QUIET_ENV not in os.environ  # restored for whatever this process runs next


def test_quiet_is_a_flag_of_run_reproduce_tune_and_demo():
    from benchmark.cli import build_parser

    parser = build_parser()
    for argv in (["run"], ["reproduce", "toy"], ["tune", "toy"], ["demo"]):
        assert parser.parse_args([*argv, "--quiet"]).quiet is True


# -- listings without torch --------------------------------------------------------------


def test_methods_and_datasets_list_without_torch_from_the_first_call(tmp_path):
    """The listings import the registering modules with inert third-party packages (the
    first call used to import torch and Lightning to fill a memo): the built-in methods as the
    registry holds them, no torch, nothing memoized, and the same lines every time."""
    from benchmark.registry import available_methods

    env = {**os.environ, "FEDBENCH_CACHE": str(tmp_path / "cache"), "FEDBENCH_PLUGINS": "", "FEDBENCH_DATASETS": ""}
    empty = tmp_path / "data"
    empty.mkdir()  # an empty data root (a --data-root that does not exist is an error: issue 50, item 8)
    script = (
        "import sys\nfrom benchmark.cli import main\n"
        f"main(['methods'])\nmain(['datasets', '--data-root', {str(empty)!r}])\n"
        "print(sorted(m for m in ('torch', 'lightning', 'open_clip', 'torchvision', 'pandas') if m in sys.modules))\n"
    )
    calls = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        for _ in range(2)
    ]
    assert all(done.returncode == 0 for done in calls), [d.stderr for d in calls]
    *printed, imported = calls[0].stdout.splitlines()
    assert imported == "[]"
    builtin = sorted(n for n in available_methods() if available_methods()[n].__module__.startswith("methods."))
    assert [line.split()[0] for line in printed[: len(builtin) + 1]] == [*builtin, "data"]  # then "data root: ..."
    assert not list((tmp_path / "cache").glob("listing-*.json"))
    assert calls[1].stdout == calls[0].stdout


def test_an_edited_source_file_changes_the_listing_memo(tmp_path):
    from benchmark.cli import listing

    method_file = tmp_path / "mine.py"
    method_file.write_text('"""One method."""\n')
    before = listing.fingerprint([method_file])
    method_file.write_text('"""One method, renamed."""\n')
    assert listing.fingerprint([method_file]) != before
    files = listing.source_files()
    root = Path(__file__).resolve().parents[2]
    for expected in ("methods/promptfl.py", "data/catalog.py", "data/loaders/coop.py", "benchmark/registry.py"):
        assert root / expected in files


def test_a_method_registered_in_this_process_is_listed(fedbench):
    from benchmark.method import FederatedMethod
    from benchmark.registry import METHODS, register_method

    @register_method("test_listed_here")
    class ListedHere(FederatedMethod):
        """Registered by a test, in this process only."""

    try:
        done = fedbench("methods")
        assert "test_listed_here Registered by a test, in this process only." in " ".join(done.stdout.split())
    finally:
        METHODS.remove("test_listed_here")


# -- a misspelt flag ---------------------------------------------------------------------


def test_a_misspelt_flag_names_the_close_one():
    from benchmark.cli.args import flag_suggestions

    known = ["--rounds", "--seed", "--local-epochs", "--out"]
    assert flag_suggestions(["--round", "3"], known) == " (--round: did you mean --rounds?)"
    assert flag_suggestions(["--local-epoch=2"], known) == " (--local-epoch: did you mean --local-epochs?)"
    assert flag_suggestions(["--sede", "1", "--zzz"], known) == " (--sede: did you mean --seed?)"
    assert flag_suggestions(["--zzz", "3"], known) == ""


# -- a stopped run -----------------------------------------------------------------------


@pytest.mark.parametrize("every, expected", [("-1", "after round 2"), ("0", "off")])
def test_a_stopped_run_says_whether_a_round_checkpoint_was_written(
    fedbench, fake_data_root, tmp_path, monkeypatch, every, expected
):
    from benchmark.federation.simulator import FederatedSimulator

    train = FederatedSimulator._train_client

    def stopped_in_round_3(self, cid, round_index):
        if round_index == 2:
            raise RunInterrupted(signal.SIGINT)
        return train(self, cid, round_index)

    monkeypatch.setattr(FederatedSimulator, "_train_client", stopped_in_round_3)
    argv = tiny_run(fake_data_root, tmp_path / "runs", "--rounds", "4", "--checkpoint-every", every)
    done = fedbench(*argv)
    assert done.returncode == 130, done.stderr
    assert "stopped by SIGINT" in done.stderr
    if expected == "off":
        assert "no round checkpoint was written (round checkpoints are off (--checkpoint-every 0))" in done.stderr
        assert "the same command starts it from round 1" in done.stderr
        return
    assert "a round checkpoint was written after round 2" in done.stderr
    assert "the same command resumes it from round 3" in done.stderr
    monkeypatch.setattr(FederatedSimulator, "_train_client", train)
    again = fedbench(*argv)
    assert again.returncode == 0 and "after round 2 from its round checkpoint" in again.stdout


def test_a_run_stopped_before_its_first_round_says_it_starts_over(tmp_path):
    from benchmark.runs.checkpoints import resume_note

    note = resume_note(tmp_path / "promptfl_dtd_seed1_abc", every=-1)
    assert note == (
        "promptfl_dtd_seed1_abc: no round checkpoint was written (it stopped before a round finished); "
        "the same command starts it from round 1"
    )


# -- an unwritable --out -----------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/mounts").is_file(), reason="needs Linux's /proc")
def test_out_on_proc_names_the_folder_and_why(fedbench, fake_data_root):
    done = fedbench(*tiny_run(fake_data_root, Path("/proc/x")))
    assert done.returncode == 2
    assert "output folder /proc/x cannot be created: nothing can be written in /proc" in done.stderr
    assert "'proc' file system" in done.stderr and "Choose a writable --out" in done.stderr


def test_an_unwritable_folder_gets_its_reason(tmp_path):
    from benchmark.runs.results import why_unwritable

    read_only = why_unwritable(tmp_path, OSError(errno.EROFS, "Read-only file system"))
    assert "mounted read-only" in read_only and "EROFS" in read_only
    denied = why_unwritable(tmp_path, PermissionError(errno.EACCES, "Permission denied"))
    assert f"this user (uid {os.getuid()}) has no permission to write there" in denied


def test_a_signal_stops_the_whole_test_session_even_inside_main(tmp_path):
    """Issue 38: `make test` did not stop on SIGINT or SIGTERM: a test running main() in
    pytest's process got the signal, main() returned 143 and the session went on. With
    tests/signal_guard.py (conftest.py loads it) the session stops: the second test never runs."""
    import textwrap
    import time

    (tmp_path / "fake.failed.json").write_text('{"error": "boom"}')
    marker = tmp_path / "second test ran"
    (tmp_path / "test_stopped.py").write_text(
        textwrap.dedent(
            f"""
            import time

            import benchmark.sweeps.compare as compare
            from benchmark.cli import main


            def test_a_long_listing(monkeypatch):
                def slow_scan(root):
                    open({str(tmp_path / "started")!r}, "w").close()
                    time.sleep(60)
                    return []

                monkeypatch.setattr(compare, "scan", slow_scan)
                main(["runs", {str(tmp_path)!r}])


            def test_after_it():
                open({str(marker)!r}, "w").close()
            """
        )
    )
    tests = Path(__file__).resolve().parents[1]  # tests/, where signal_guard.py is
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    for signum in (signal.SIGTERM, signal.SIGINT):
        (tmp_path / "started").unlink(missing_ok=True)
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "signal_guard", "-q", "-p", "no:cacheprovider", str(tmp_path)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline and not (tmp_path / "started").exists() and process.poll() is None:
            time.sleep(0.1)
        assert (tmp_path / "started").exists(), process.communicate()[0]
        process.send_signal(signum)
        output, _ = process.communicate(timeout=60)
        assert process.returncode != 0, output
        assert "KeyboardInterrupt" in output and f"stopped by {signal.Signals(signum).name}" in output, output
        assert not marker.exists(), output


def test_a_plain_progress_line_says_how_long_is_left(monkeypatch):
    """Issue 60, item 10: progress lines had no ETA. After a step, a line says the time left
    at the pace so far (rounds of a resumed run that were done before are not counted)."""
    import time

    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    stream = io.StringIO()
    bar = progress.progress_bar(total=10, desc="training", unit="rounds", initial=4, stream=stream)
    time.sleep(0.3)
    bar.update()  # one round in about 0.3 s, five to go: about 2 s left (not 10 x 0.3 / 5)
    bar.update(5)
    bar.close()
    start, step, *_, end = stream.getvalue().splitlines()
    assert "left" not in start and "left" not in end  # nothing measured yet; nothing left
    seconds = int(step.split("about ")[1].split("s left")[0])
    assert step.startswith("training: 5/10 rounds (50%), 0s, about ") and 1 <= seconds <= 3


def test_a_duration_reads_at_the_precision_that_matters():
    assert [progress.duration(s) for s in (44.6, 185, 3600 * 2 + 4 * 60 + 59)] == ["45s", "3m05s", "2h04m"]


def test_a_library_warning_is_one_fedbench_line(fedbench, monkeypatch):
    """Issue 60, item 11: a UserWarning printed Python's two lines, the second the source line
    that raised it. Every warning of a command is one `fedbench: warning: ...` line."""
    import warnings

    from benchmark.cli.commands import presets

    def warn_then_list(args):
        warnings.warn("something odd\n  over two lines", UserWarning)
        return 0

    monkeypatch.setattr(presets, "run", warn_then_list)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        done = fedbench("presets")
    assert done.returncode == 0
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        "fedbench: warning: something odd over two lines (UserWarning at tests/system/test_frictions.py:"
    )
