"""SIGINT (Ctrl-C) or SIGTERM stops the whole test session, `make test` included, even while
a test runs fedbench's `main()` in this process.

`main()` turns a signal into its exit code (130, 143) and returns it, which is right for the
command line but inside pytest made the signal fail one test and the session go on. So the
session installs `stop_session` for both signals, marked `fedbench_chain`: `main()` calls a
previous handler so marked after it has reported the stop, and it raises KeyboardInterrupt,
which ends the session. A test that signals itself on purpose uses `signal_self`.
conftest.py imports the hook; `python -m pytest -p signal_guard` loads it alone.
"""

from __future__ import annotations

import os
import signal

SELF_SIGNALLED: set[int] = set()  # signals a test sent to this process on purpose


def signal_self(signum: int) -> None:
    """Send `signum` to this process as a test that checks how fedbench stops; the session goes on."""
    SELF_SIGNALLED.add(signum)
    os.kill(os.getpid(), signum)


def stop_session(signum, frame) -> None:
    if signum in SELF_SIGNALLED:
        SELF_SIGNALLED.discard(signum)
        return
    raise KeyboardInterrupt(f"the test session was stopped by {signal.Signals(signum).name}")


stop_session.fedbench_chain = True  # benchmark.cli.main calls it after reporting the stop


def pytest_sessionstart(session) -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop_session)
