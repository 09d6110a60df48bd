"""Per-cell locks: one process at a time runs a cell, however many sweeps share the folder.

A cell's lock is the hidden file `<out>/.<run name>.lock`, held with `flock` for the
whole run (its checkpoints, its run folder) and removed at its end. The kernel drops the
lock when its process dies, so a lock left by a killed process is stale by construction and
the next process takes it; the file also names its holder (pid, host, start time) for the
message a waiting process prints. On a shared file system `flock` must reach every machine
(NFSv4 does; Lustre needs the `flock` mount option).
"""

from __future__ import annotations

import json
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from benchmark.errors import CellBusy
from benchmark.files import open_locked

_HELD: dict[str, int] = {}  # lock path -> nesting depth in this process (a sweep, then its run)


def lock_path(run_dir: Path) -> Path:
    run_dir = Path(run_dir)
    return run_dir.parent / f".{run_dir.name}.lock"


@contextmanager
def cell_lock(run_dir: Path) -> Iterator[Path]:
    """Hold the lock of `run_dir`'s cell, or raise CellBusy naming the process that holds it."""
    path = lock_path(run_dir)
    key = str(path.absolute())
    if key in _HELD:  # already ours: `reproduce` locks the cell, then the run inside it does
        _HELD[key] += 1
        try:
            yield path
        finally:
            _HELD[key] -= 1
        return
    fd = _acquire(path)
    _HELD[key] = 1
    try:
        yield path
    finally:
        del _HELD[key]
        path.unlink(missing_ok=True)  # before unlocking: a waiter that opened it re-checks the inode
        os.close(fd)  # releases the lock


def _acquire(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = open_locked(path, wait=False)
        if fd is None:
            raise CellBusy(f"cell {path.stem.lstrip('.')} is being run by {_read_holder(path)}")
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the holder removed the file between our open and flock: try again
            break
        os.close(fd)
    holder = {"pid": os.getpid(), "host": platform.node(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)
    return fd


def _read_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text() or "{}")
        return f"pid {holder['pid']} on {holder['host']} (since {holder['started']})"
    except (ValueError, KeyError, OSError):
        return "another process"
