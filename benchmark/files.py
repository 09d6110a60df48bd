"""Files that several processes share: a write that is whole or absent, and a lock.

Written whole or not at all: a run folder (`atomic_folder`); every file a command writes
outside one — a table and its figures, a cell's failure record, a round checkpoint, a
tuning report, the registries' listing memo, a dataset's generated split and attribute
files, the decoded-image cache, the toy CLIP's checkpoint, the method manifest, a
partition's CSV and figure, a bench report, a dashboard spec (`atomic_write`,
`atomic_figure`). Held with `flock` through `open_locked` / `file_lock`: a
tuning study, the toy CLIP's pretraining and a cell (`benchmark.runs.locks`).
`tests/core/test_files.py` fails when another module replaces a file by rename, makes a
temporary file to rename into place, or takes a flock on its own.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import os
import re
import secrets
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator


def cache_root() -> Path:
    """The cache folder: $FEDBENCH_CACHE, default ~/.cache/fedbench (the toy world, features,
    listings, code trees)."""
    return Path(os.environ.get("FEDBENCH_CACHE", Path.home() / ".cache" / "fedbench"))


def atomic_write(path: Path | str, data: str | bytes | Callable[[Path], None]) -> None:
    """Write `path` whole or not at all: `data` (text, written as UTF-8; bytes; or a function
    writing the file it is given) goes into a hidden file beside it named by this process
    and thread, which then replaces `path` in one rename; a reader sees the old file or the
    new one, never half of one, and two writers never share a hidden file. The hidden file
    is removed if writing fails (the error is raised)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    try:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        elif isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            data(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_figure(figure: Any, path: Path | str, **savefig: Any) -> None:
    """Save a matplotlib figure to `path` whole or not at all, in the format its suffix names
    (the hidden file's name has no usable suffix, so the format is given explicitly)."""
    path = Path(path)
    file_format = path.suffix.lstrip(".").lower() or "png"
    atomic_write(path, lambda tmp: figure.savefig(tmp, format=file_format, **savefig))


@contextmanager
def atomic_folder(path: Path | str) -> Iterator[Path]:
    """Build the folder `path` whole or not at all: the body fills the hidden sibling folder
    it is given, which then takes `path`'s place in one rename (an older `path` is swapped
    out in the same rename and removed), so `path` is, at every instant, the old folder or
    the new one, never missing or half written. If the body raises, the hidden folder is
    removed and `path` is left as it was. Two writers of one `path` may run at once (the
    last one's folder stays); hidden folders left by killed processes are removed by the
    next writer (each is held with a lock while its writer lives)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_abandoned_staging(path)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    staging = path.with_name(f".{path.name}.{token}.partial")
    lock = _staging_lock(staging)
    fd = open_locked(lock)  # before the folder exists: a folder without a held lock is abandoned
    try:
        staging.mkdir()  # the umask's permissions, as any folder the user creates
        yield staging
        _swap_into_place(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the body failed, or the older folder swapped out
        lock.unlink(missing_ok=True)
        os.close(fd)


def _staging_lock(staging: Path) -> Path:
    return staging.with_name(f"{staging.name}.lock")


def _remove_abandoned_staging(path: Path) -> None:
    # This writer's names, and those of the earlier writer (mkdtemp's 8 characters, no lock);
    # not `.{name}.x.….partial`, another path's.
    own = re.compile(rf"\.{re.escape(path.name)}\.(\d+-[0-9a-f]+|[a-z0-9_]{{8}})\.partial")
    pattern = f".{glob.escape(path.name)}.*.partial"
    found = {p.name.removesuffix(".lock") for p in (*path.parent.glob(pattern), *path.parent.glob(pattern + ".lock"))}
    for name in sorted(n for n in found if own.fullmatch(n)):
        staging = path.with_name(name)
        lock = _staging_lock(staging)
        fd = open_locked(lock, wait=False)
        if fd is None:  # its writer is alive
            continue
        try:
            shutil.rmtree(staging, ignore_errors=True)
            lock.unlink(missing_ok=True)
        finally:
            os.close(fd)


_RENAME_EXCHANGE = 2  # linux/fs.h


def _swap_into_place(staging: Path, path: Path) -> None:
    """Move the folder `staging` to `path` in one rename; an existing `path` ends up at
    `staging` (for the caller to remove)."""
    while True:
        if not path.exists():
            try:
                os.rename(staging, path)
                return
            except OSError as exc:  # another writer put a folder there meanwhile: swap with it
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        try:
            if _exchange(staging, path):
                return
        except FileNotFoundError:
            continue  # `path` was removed meanwhile: start over
        # The exchange is missing (not Linux, or a file system without it): two renames, with
        # `path` missing between them.
        old = path.with_name(f".{path.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
        try:
            os.rename(path, old)
        except FileNotFoundError:
            continue  # another writer's moment without it: start over
        os.rename(staging, path)  # (a cell's run folder has one writer at a time: its cell lock)
        os.rename(old, staging)
        return


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths `a` and `b` atomically (Linux renameat2 with RENAME_EXCHANGE); False
    where the system or the file system has no such call; raises for any other failure
    (FileNotFoundError: one of them vanished)."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd = -100  # AT_FDCWD: the paths are absolute or relative to the working directory
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, f"cannot swap {a} with {b}: {os.strerror(code)}")


try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:  # no C library to load (not a POSIX system)
    _LIBC = None


def open_locked(path: Path | str, wait: bool = True) -> int | None:
    """`path` (created if missing) opened with an exclusive `flock` held on it: its file
    descriptor, whose closing releases the lock (as the kernel does when the process dies).
    With `wait` False, None at once when another holder has it (another process, or
    another open of it in this one)."""
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
def file_lock(path: Path | str, wait: bool = True, on_busy: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold `open_locked(path, wait)` for the body; yields whether it is held (False only
    with `wait` False, when another holder has it: the body says what that means).
    `on_busy` (with `wait`) is called once before waiting when another holder has it: say
    why nothing happens."""
    fd = open_locked(path, wait=False)
    if fd is None and wait:
        if on_busy is not None:
            on_busy()
        fd = open_locked(path)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)


def emit_report(text: str, out: Path | str | None, started: float) -> str:
    """A report command's ending: the markdown on stdout, its wall time on stderr, and, with
    `out`, the file written whole (`atomic_write`); returns `text`."""
    import sys
    import time

    print(text)
    print(f"({time.time() - started:.0f} s)", file=sys.stderr)
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, text)
    return text
