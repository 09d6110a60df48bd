"""The one atomic write and the one file lock (`benchmark.files`), which every writer of a
shared file uses (run folders, checkpoints, tuning reports, the listing memo, generated split
and attribute files, the decoded-image cache, the method manifest, tables and their figures)
and every lock (tuning studies, the toy CLIP's pretraining, cells): two writers at once on
each path, and the rule that nothing else replaces or locks a file."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from benchmark.files import atomic_folder, atomic_write, file_lock, open_locked

ROOT = Path(__file__).resolve().parents[2]


def test_atomic_write_writes_text_bytes_or_what_a_function_writes_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "out.json"
    atomic_write(path, "old")
    atomic_write(path, "new")
    assert path.read_text() == "new"
    atomic_write(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    atomic_write(path, lambda tmp: tmp.write_text("by a function"))
    assert path.read_text() == "by a function"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_removes_its_temporary_one(tmp_path):
    path = tmp_path / "out.json"
    atomic_write(path, "whole")

    def half(tmp):
        tmp.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(path, half)
    assert path.read_text() == "whole"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_held_lock_is_refused_without_waiting_and_free_again_once_released(tmp_path):
    path = tmp_path / ".study.lock"
    with file_lock(path) as held:
        assert held
        assert open_locked(path, wait=False) is None  # another open file: flock refuses it
        with file_lock(path, wait=False) as again:
            assert not again
    fd = open_locked(path, wait=False)
    assert fd is not None
    os.close(fd)


# -- two writers at once, on every path that writes a shared file -------------------------


def together(write: Callable[[int], None], repeats: int, writers: int = 2) -> None:
    """`write(writer)` in `writers` threads started at once, `repeats` times over; raises
    the first error any of them raised."""
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def loop(writer: int) -> None:
        try:
            for _ in range(repeats):
                barrier.wait()
                write(writer)
        except BaseException as exc:  # noqa: BLE001 (reported below, in the test's thread)
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=loop, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def test_two_atomic_writers_of_one_file_never_collide_and_a_reader_sees_one_whole_file(tmp_path):
    path = tmp_path / "report.json"
    atomic_write(path, "0" * 100_000)
    seen: set[str] = set()
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.add(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        together(lambda writer: atomic_write(path, str(writer + 1) * 100_000), repeats=50)
    finally:
        done.set()
        reader.join()
    assert seen <= {"0" * 100_000, "1" * 100_000, "2" * 100_000}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_a_folder_is_replaced_in_one_rename_so_a_reader_never_finds_it_missing(tmp_path):
    path = tmp_path / "promptfl_toy_seed1_abc"
    with atomic_folder(path) as staging:
        (staging / "summary.json").write_text("first")
    missing = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            if not (path / "summary.json").is_file():
                missing.append(time.perf_counter())

    def write(writer: int) -> None:
        with atomic_folder(path) as staging:
            for k in range(20):
                (staging / f"part{k}.csv").write_text(str(writer))
            (staging / "summary.json").write_text(str(writer))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        together(write, repeats=40)
    finally:
        done.set()
        reader.join()
    assert not missing, f"the folder was missing {len(missing)} times while it was replaced"
    written = {p.read_text() for p in path.iterdir()}
    assert len(written) == 1 and written <= {"0", "1"}  # one writer's whole folder, not a mix
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no hidden folder or lock left


def test_a_failed_folder_write_keeps_the_old_folder_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "run"
    with atomic_folder(path) as staging:
        (staging / "summary.json").write_text("whole")
    with pytest.raises(OSError, match="disk full"):
        with atomic_folder(path) as staging:
            (staging / "metrics.csv").write_text("half")
            raise OSError("disk full")
    assert [p.name for p in path.iterdir()] == ["summary.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_killed_writers_hidden_folder_is_removed_and_a_living_ones_kept(tmp_path):
    path = tmp_path / "run"
    dead = tmp_path / ".run.4242-dead.partial"  # a killed writer: its lock went with it
    earlier = tmp_path / ".run.k2j_x8a0.partial"  # a killed writer of the earlier code (mkdtemp's name)
    alive = tmp_path / ".run.4343-beef.partial"
    other_run = tmp_path / ".run.x.4444-abcd.partial"  # the run named "run.x": not this run's
    for folder in (dead, earlier, alive, other_run):
        folder.mkdir()
    with file_lock(tmp_path / f"{alive.name}.lock"):
        with atomic_folder(path) as staging:
            (staging / "summary.json").write_text("new")
        assert not dead.exists() and not earlier.exists() and alive.is_dir() and other_run.is_dir()


def test_two_runs_writing_one_run_folder_at_once_leave_one_whole_folder(tmp_path):
    from benchmark.config import RunConfig
    from benchmark.runs.results import write_run

    run_dir = tmp_path / "runs" / "promptfl_toy_seed1_abc"

    def write(writer: int) -> None:
        write_run(run_dir, RunConfig(), [], {"writer": writer}, {"writer": writer})

    write(-1)  # the registries' first discovery is not what this test is about: done before
    together(write, repeats=3)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert json.loads((run_dir / "partition.json").read_text()) == summary  # both from one writer
    assert sorted(p.name for p in run_dir.parent.iterdir()) == [run_dir.name]


def test_two_writers_of_a_generated_attribute_file_at_once(tmp_path):
    import data.toy.datasets  # noqa: F401  (registers the toy attribute generators)
    from data.attributes import ATTRIBUTE_GENERATORS, write_generated

    path = tmp_path / "attributes" / "toy.json"

    def write(writer: int) -> None:
        write_generated("toy", path)
        path.unlink(missing_ok=True)  # the next round writes again

    together(write, repeats=200)
    write_generated("toy", path)
    assert json.loads(path.read_text()) == ATTRIBUTE_GENERATORS["toy"]()
    assert [p.name for p in path.parent.iterdir()] == ["toy.json"]


def test_two_runs_decoding_the_same_images_at_once_share_one_whole_cache_file(tmp_path, monkeypatch):
    import numpy as np
    import torch
    from PIL import Image

    from data.base import FileImages
    from data.decoded import cache_root, decoded_images

    monkeypatch.setenv("FEDBENCH_CACHE", str(tmp_path / "cache"))
    files = []
    for n in range(3):
        files.append(tmp_path / f"{n}.png")
        Image.fromarray(np.full((40, 30 + n, 3), 40 * n, dtype=np.uint8)).save(files[-1])
    split = FileImages("sample/train", files, [0, 0, 0], ["a"], transform=lambda image: image)
    expected = decoded_images(split, [0, 1, 2], 64, cache=False)

    def write(writer: int) -> None:
        for stored in cache_root().glob("*.pt"):
            stored.unlink(missing_ok=True)  # both decode and write, at once
        pixels, layout = decoded_images(split, [0, 1, 2], 64)
        assert torch.equal(pixels, expected[0]) and torch.equal(layout, expected[1])

    together(write, repeats=10)
    (stored,) = cache_root().iterdir()  # one whole file, no temporary one
    assert torch.equal(torch.load(stored, weights_only=True)["pixels"], expected[0])


def test_two_writers_of_the_method_manifest_at_once(tmp_path):
    import importlib.util

    from benchmark.registry import hyperparameter_manifest

    spec = importlib.util.spec_from_file_location(
        "write_method_manifest", ROOT / "scripts" / "write_method_manifest.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    path = tmp_path / "hyperparameters.json"
    together(lambda writer: script.write_manifest(path), repeats=10)
    assert json.loads(path.read_text()) == json.loads(json.dumps(hyperparameter_manifest()))
    assert [p.name for p in tmp_path.iterdir()] == ["hyperparameters.json"]


# The toy CLIP's pretraining lock: tests/data/toy/test_world.py runs two processes that need
# the same checkpoint at once (one builds it, the other waits).


# -- one atomic write and one lock: the rule ------------------------------------------------

# What only benchmark/files.py may do: replace a file by rename, make a temporary file to
# rename into place, take a flock, name a half-written file ".partial".
FORBIDDEN = re.compile(r"os\.replace\(|os\.rename\(|mkstemp\(|fcntl\.flock\(|\bimport fcntl\b|[\"']\.partial[\"']")
SCANNED = ("benchmark", "data", "methods", "scripts", "flower", "tests")


def test_only_benchmark_files_replaces_or_locks_a_file():
    offenders = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in (ROOT / "benchmark" / "files.py", Path(__file__).resolve()):
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if FORBIDDEN.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, (
        "write shared files with benchmark.files (atomic_write, atomic_folder) and lock them with "
        "benchmark.files (file_lock, open_locked), not on your own:\n" + "\n".join(offenders)
    )


def test_a_figure_is_saved_whole_in_the_format_its_suffix_names(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmark.files import atomic_figure

    figure, axes = plt.subplots()
    axes.plot([0, 1], [1, 0])
    magic = {"p.png": b"\x89PNG", "p.pdf": b"%PDF", "p.svg": b"<?xml"}
    for name in magic:
        atomic_figure(figure, tmp_path / name, dpi=50)
    assert {name: (tmp_path / name).read_bytes()[: len(start)] for name, start in magic.items()} == magic
    with pytest.raises(ValueError, match="not supported"):
        atomic_figure(figure, tmp_path / "p.txt")
    plt.close(figure)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(magic)
