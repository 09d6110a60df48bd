"""Progress output that suits where it goes: tqdm's bar on a terminal, plain lines when the
bar's stream (stderr) is redirected to a file or a pipe, nothing under `--quiet`.

A tqdm bar redraws itself with carriage returns and escape codes; in a log file (`fedbench
run ... 2> log`, a Slurm job's output) every redraw stays, so a log fills with them. Redirected,
a bar prints a line at the start, at each tenth of the way and at the end instead, and one every
LINE_SECONDS in between -- also while one step takes longer than that (a thread prints it: a
sweep's cell runs for minutes between two updates of the sweep's bar); a nested bar (the
feature cache, the evaluation of the clients: `nested=True`) prints only the timed lines, and
its last line once it printed one, so short inner loops leave nothing in the log.

`--quiet` (run, reproduce, tune, demo) sets FEDBENCH_QUIET=1 (benchmark.cli.main), which the
workers of a sweep inherit: no bar and no progress line anywhere; results, notes and errors still print.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import Any, Iterable, TextIO

QUIET_ENV = "FEDBENCH_QUIET"
LINE_SECONDS = 30.0  # a long stretch without a line: one anyway, so a log shows the run is alive


def is_quiet() -> bool:
    return os.environ.get(QUIET_ENV, "").strip().lower() not in ("", "0", "false", "no")


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams (pytest's capture) are no terminal
        return False


def progress_bar(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    enabled: bool = True,
    initial: int = 0,
    nested: bool = False,
    leave: bool = True,
    stream: TextIO | None = None,
) -> Any:
    """A tqdm bar on a terminal, `PlainProgress` elsewhere, a silent one when `enabled` is False
    or under --quiet (`leave`: whether tqdm's bar stays on the terminal once closed). All
    three take tqdm's `update`, `set_postfix_str`, `set_postfix`, `close` and iterate over
    `iterable`."""
    stream = sys.stderr if stream is None else stream
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    if not enabled or is_quiet():
        return PlainProgress(iterable, total, desc, unit, initial, stream, silent=True)
    if is_terminal(stream):
        from tqdm.auto import tqdm

        return tqdm(
            iterable,
            total=total,
            desc=desc or None,
            unit=unit,
            initial=initial,
            leave=leave,
            dynamic_ncols=True,
            file=stream,
        )
    return PlainProgress(iterable, total, desc, unit, initial, stream, nested=nested)


class PlainProgress:
    """A progress bar as plain lines ('training: 3/10 rounds (30%), 12s, about 28s left'): one at the
    start, one per tenth of the total, one at the end and one every LINE_SECONDS between
    (printed by a thread while a step is slower than that); nested, only the timed ones, and
    the last once a timed one was printed."""

    def __init__(
        self,
        iterable: Iterable | None,
        total: int | None,
        desc: str,
        unit: str,
        initial: int,
        stream: TextIO,
        nested: bool = False,
        silent: bool = False,
    ) -> None:
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.n = self._initial = initial
        self.stream, self.nested, self.silent = stream, nested, silent
        self.postfix = ""
        self.started = self.last_line = time.monotonic()
        self._tenth = self._tenths(self.n)
        self._closed = False
        self._printed: int | None = None  # the count of the last line
        self._lock = threading.RLock()  # the heartbeat thread prints too
        self._stopped = threading.Event()
        if not silent and not nested:  # a nested bar runs inside one that has a heartbeat
            self._line(self.started)  # where it starts (a resumed run: the rounds already done)
            # The thread holds the bar weakly: a bar dropped without close() (an error) stops it.
            threading.Thread(target=_heartbeat, args=(weakref.ref(self), self._stopped), daemon=True).start()

    def __iter__(self):
        try:
            for item in self.iterable if self.iterable is not None else ():
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        self._stopped.set()

    def _tenths(self, n: int) -> int:
        return (10 * n) // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.silent:
            return
        now = time.monotonic()
        tenth = self._tenths(self.n)
        if (tenth > self._tenth and not self.nested) or now - self.last_line >= LINE_SECONDS:
            self._tenth = tenth
            self._line(now)

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = str(text)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        # Where it ended (the last tenth may have said so already); a bar stopped short says where
        # it stopped; a nested bar that said where it was says where it ended (never '1/2 clients' last).
        if not self.silent and self.n != self._printed and (not self.nested or self._printed is not None):
            self._line(time.monotonic())

    def beat(self) -> float:
        """The heartbeat: a line when LINE_SECONDS passed since the last; the seconds to the next."""
        with self._lock:
            now = time.monotonic()
            if not self._closed and now - self.last_line >= LINE_SECONDS:
                self._line(now)
            return max(0.01, self.last_line + LINE_SECONDS - now)

    def _line(self, now: float) -> None:
        with self._lock:
            self.last_line, self._printed = now, self.n
            count = f"{self.n}/{self.total}" if self.total else str(self.n)
            share = f" ({100 * self.n // self.total}%)" if self.total else ""
            label = f"{self.desc}: " if self.desc else ""
            postfix = f" [{self.postfix}]" if self.postfix else ""
            line = f"{label}{count} {self.unit}{share}, {now - self.started:.0f}s{self._eta(now)}{postfix}"
            print(line, file=self.stream, flush=True)

    def _eta(self, now: float) -> str:
        """', about 3m05s left', at the pace of the steps this bar has seen (a resumed run's
        earlier rounds are not counted); '' before the first step and at the end."""
        done = self.n - self._initial
        if not self.total or done <= 0 or self.n >= self.total or now <= self.started:
            return ""
        return f", about {duration((self.total - self.n) * (now - self.started) / done)} left"


def duration(seconds: float) -> str:
    """'45s', '3m05s', '2h04m': a time to wait, to the precision that matters."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _heartbeat(bar: "weakref.ref[PlainProgress]", stopped: threading.Event) -> None:
    """Until the bar is closed or dropped: a line every LINE_SECONDS without one."""
    wait = LINE_SECONDS
    while not stopped.wait(wait):
        alive = bar()
        if alive is None:
            return
        try:
            wait = alive.beat()
        except ValueError:  # its stream was closed (a test's captured stream): nothing left to tell
            return
        del alive
