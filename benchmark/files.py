"""Files that several processes share: a write that is whole or absent, and a lock.

A run folder's round checkpoint, a tuning report, the registries' listing memo and a
dataset's generated split file are written with `atomic_write`; a tuning study and a
cell (`benchmark.runs.locks`) are held with `flock` through `open_locked` / `file_lock`.
"""

from __future__ import annotations

import fcntl
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator


def atomic_write(path: Path | str, data: str | bytes | Callable[[Path], None]) -> None:
    """Write `path` whole or not at all: `data` (text, bytes, or a function writing the file
    it is given) goes into a hidden file beside it named by this process, which then
    replaces `path` in one rename; a reader sees the old file or the new one, never half of
    one. The hidden file is removed if writing fails (the error is raised)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        if isinstance(data, str):
            tmp.write_text(data)
        elif isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            data(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def open_locked(path: Path | str, wait: bool = True) -> int | None:
    """`path` (created if missing) opened with an exclusive `flock` held on it: its file
    descriptor, whose closing releases the lock (as the kernel does when the process dies).
    With `wait` False, None at once when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def file_lock(path: Path | str, wait: bool = True) -> Iterator[bool]:
    """Hold `open_locked(path, wait)` for the body; yields whether it is held (False only
    with `wait` False, when another process holds it: the body says what that means)."""
    fd = open_locked(path, wait)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)
