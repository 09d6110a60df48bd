"""The errors a user can cause and fix, and the two ways a run ends without a result:
divergence and a stop signal.

Every error whose message tells the user what to change subclasses `UserError`: the CLI
prints its message without a traceback, and a sweep reports the cell instead of retrying it.
The backbone, registry and dataset errors are defined beside the code that raises
them (`BackboneError`, `MethodError`, `DatasetError`); `ConfigError` is here, shared by
`benchmark.config` and the protocol registry (`benchmark.protocol_registry`)."""

import signal


class UserError(Exception):
    """Bad input the user can fix; the message names the thing, what was expected and how to fix it."""


class ConfigError(UserError, ValueError):
    """A configuration value is wrong; the message names it and says what is expected.
    Here rather than in `benchmark.config` so that the protocol registry, which the config
    reads its protocol options from, can raise it without importing the config back."""


class SetupWarning(UserWarning):
    """Something in the user's setup that runs but gives wrong or surprising numbers (OpenAI
    weights in a model without QuickGELU); the CLI prints it as one line, `warning: ...`."""


class CellBusy(UserError, RuntimeError):
    """Another process holds the lock of this cell (benchmark.runs.locks); the message names it."""


class DivergenceError(RuntimeError):
    """Training produced a non-finite loss or state. The run stops and writes nothing:
    a diverged run must never look like a result (its metrics would sit at chance)."""


class RunInterrupted(BaseException):
    """SIGTERM or SIGINT arrived. A BaseException, like KeyboardInterrupt, so that no
    `except Exception` (a sweep's per-cell guard, tracking) can swallow it, and raised by our
    own handler because Lightning turns a KeyboardInterrupt inside `fit` into exit code 1."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.signal_name = signal.Signals(signum).name
        # What the stop left, one line per run, added by the code that knows the run on the
        # way out (benchmark.runs.runner, benchmark.sweeps.sweep): whether a round checkpoint
        # was written and from which round the same command resumes. The CLI prints them.
        self.notes: list[str] = []
        super().__init__(f"stopped by {self.signal_name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # the shell's convention: SIGTERM 143, SIGINT 130
