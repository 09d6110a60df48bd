"""The errors a user can cause and fix (the CLI prints their message without a traceback),
and the two ways a run ends without a result: divergence and a stop signal."""

from benchmark.backbone import BackboneError
from benchmark.config import ConfigError
from benchmark.registry import MethodError
from data.base import DatasetError


class CellBusy(RuntimeError):
    """Another process holds the lock of this cell (benchmark.runs.locks); the message names it."""


USER_ERRORS = (BackboneError, ConfigError, MethodError, DatasetError, CellBusy)


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or state. The run stops and writes nothing:
    a diverged run must never look like a result (its metrics would sit at chance)."""


class RunInterrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` (a sweep's per-cell guard, tracking) can swallow it, and raised by our
    own handler because Lightning turns a KeyboardInterrupt inside `fit` into exit code 1."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        super().__init__(f"stopped by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: SIGTERM 143, SIGINT 130
