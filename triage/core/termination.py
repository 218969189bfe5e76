"""SIGTERM and SIGHUP as an exception, so clean-up runs for them as it does for Ctrl-C.

Python's default for SIGTERM is to die at once: no `finally`, no atexit, so every child a probe
started would be left running. `install_signal_handlers` makes SIGTERM and SIGHUP raise
`Terminated` in the main thread instead; the command line turns it into exit status 128 + signal.
Kept apart from triage.core.children (which imports subprocess) because every command, `ask`
included, installs the handlers.
"""

from __future__ import annotations

import signal


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived: unwind (running every `finally`) and exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def _raise(signum: int, frame: object) -> None:
    raise Terminated(signum)


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise Terminated in the main thread (where they are at their default)."""
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is None or signal.getsignal(number) is not signal.SIG_DFL:
            continue
        try:
            signal.signal(number, _raise)
        except ValueError:  # not the main thread: leave signals to whoever owns it
            return


def ignore_signals() -> None:
    """Stop taking Ctrl-C, SIGTERM and SIGHUP (clean-up in progress must not be cut short)."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None:
            try:
                signal.signal(number, signal.SIG_IGN)
            except ValueError:
                return
