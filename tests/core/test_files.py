"""The one atomic write and the one file lock (`benchmark.files`), which checkpoints, tuning
reports, the listing memo, generated split files, tuning studies and cell locks share."""

from __future__ import annotations

import os

import pytest

from benchmark.files import atomic_write, file_lock, open_locked


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
