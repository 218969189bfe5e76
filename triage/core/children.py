"""Every process triage starts, and the promise that none of them outlives it.

Probes are guests on someone's cluster: whatever signal ends triage, and whenever it arrives, no
child may be left running. Four layers, because each covers what the others cannot:

- every child starts in a session of its own (so a terminal's Ctrl-C does not reach it half-way
  and killing its group ends whatever it started) and is tracked here until it is reaped;
- `kill_all` ends every tracked session; it runs at interpreter exit (atexit) and when a probe's
  runner gives up on a probe thread that did not stop (`kill_owned`). Once it has run, a child
  registered late (by a thread still spawning) is killed at once;
- on Linux each child gets a parent-death signal (prctl PR_SET_PDEATHSIG, SIGKILL), so even a
  SIGKILLed triage takes its children with it;
- Python children of triage (the dist ranks, the app's probe process) also run `watch_parent`, a
  thread that ends the child when the process that started it disappears (any platform).

SIGTERM and SIGHUP become an exception (triage.core.termination), so that clean-up runs for them as
it does for Ctrl-C's KeyboardInterrupt.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

PARENT_ENV = "TRIAGE_PARENT_PID"  # set in every child's environment: the pid that started it
# torch built without NumPy warns about it on import; the warning says nothing about the job.
TORCH_NUMPY_WARNING = "Failed to initialize NumPy"
_WARNING_FILTER = f"ignore:{TORCH_NUMPY_WARNING}:UserWarning"
WATCH_INTERVAL_S = 0.2
_PR_SET_PDEATHSIG = 1


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.live: dict[int, object] = {}  # session id (the child's pid) -> owner
        self.closed = False
        self.ended: weakref.WeakSet[Any] = weakref.WeakSet()  # owners already killed

    def add(self, pid: int, owner: object) -> None:
        with self.lock:
            if not self.closed and (owner is None or owner not in self.ended):
                self.live[pid] = owner
                return
        kill_session(pid)  # triage (or this child's probe) is being ended: it must not survive

    def remove(self, pid: int) -> None:
        with self.lock:
            self.live.pop(pid, None)

    def take(self, owner: object | None = None, close: bool = False) -> list[int]:
        with self.lock:
            if close:
                self.closed = True
            if owner is not None:
                with contextlib.suppress(TypeError):
                    self.ended.add(owner)
            pids = [pid for pid, who in self.live.items() if owner is None or who is owner]
            for pid in pids:
                del self.live[pid]
            return pids


_REGISTRY = _Registry()
_prctl: Any = None


def kill_session(pid: int) -> None:
    """SIGKILL the session (process group) led by `pid`; quiet when it is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _libc_prctl() -> Any:
    """libc's prctl, resolved in the parent so the child after fork only makes the call."""
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        try:
            import ctypes

            function = ctypes.CDLL(None, use_errno=True).prctl
            function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
            function.restype = ctypes.c_int
            _prctl = function
        except (OSError, AttributeError):
            _prctl = False
    return _prctl or None


def _die_with(parent: int, prctl: Any) -> Callable[[], None]:
    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os._exit(1)

    return preexec


def popen(
    argv: Sequence[str],
    *,
    owner: object | None = None,
    env: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> subprocess.Popen[Any]:
    """subprocess.Popen, in a session of its own, dying with this process, tracked until `reap`.

    `owner` groups children for `kill_owned` (the probes pass their cancel event)."""
    child_env = dict(os.environ if env is None else env)
    child_env[PARENT_ENV] = str(os.getpid())
    filters = child_env.get("PYTHONWARNINGS", "")
    if _WARNING_FILTER not in filters:
        child_env["PYTHONWARNINGS"] = f"{filters},{_WARNING_FILTER}" if filters else _WARNING_FILTER
    prctl = _libc_prctl()
    if prctl is not None:
        kwargs["preexec_fn"] = _die_with(os.getpid(), prctl)
    proc: subprocess.Popen[Any] = subprocess.Popen(
        list(argv), env=child_env, start_new_session=True, **kwargs
    )
    _REGISTRY.add(proc.pid, owner)
    return proc


def reap(proc: subprocess.Popen[Any], grace_s: float = 0.0) -> int:
    """Give `proc` up to `grace_s` to exit, end its session, wait for it, stop tracking it;
    returns its exit status. The session is killed even when the child has exited: anything it
    started is in it."""
    if grace_s > 0:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(grace_s)
    kill_session(proc.pid)
    code = proc.wait()
    _REGISTRY.remove(proc.pid)
    return code


def kill_owned(owner: object) -> int:
    """Kill every tracked session started for `owner`, and any it starts from now on; returns how
    many there were."""
    pids = _REGISTRY.take(owner)
    for pid in pids:
        kill_session(pid)
    return len(pids)


def kill_all() -> None:
    """Kill every tracked session, and any registered later (triage is exiting)."""
    for pid in _REGISTRY.take(close=True):
        kill_session(pid)


def quiet_torch_import() -> None:
    """Hide torch's NumPy warning in this process (call before importing torch)."""
    import warnings

    warnings.filterwarnings("ignore", message=TORCH_NUMPY_WARNING, category=UserWarning)


def live_count() -> int:
    """How many tracked child processes are still alive."""
    with _REGISTRY.lock:
        return len(_REGISTRY.live)


def _at_exit() -> None:
    from triage.core.termination import ignore_signals

    ignore_signals()  # a second Ctrl-C must not cut the clean-up short
    kill_all()


atexit.register(_at_exit)


def watch_parent(interval_s: float = WATCH_INTERVAL_S) -> None:
    """In a child of triage: end this process (and its session) when triage disappears.

    Reads the parent's pid from PARENT_ENV. Where that pid is alive but is not this process's
    parent, the variable was inherited from further up (a child of a child), and nothing is
    watched. Arms the parent-death signal too, for a child started without it."""
    raw = os.environ.get(PARENT_ENV, "")
    if not raw.isdigit():
        return
    parent = int(raw)
    if os.getppid() != parent:
        if _alive(parent):
            return
        _end_self()
    prctl = _libc_prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                _end_self()

    threading.Thread(target=watch, name="triage-parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end_self() -> None:
    """Kill this process's group when this process leads it (its session), else just exit."""
    if os.getpgrp() == os.getpid():
        with contextlib.suppress(OSError):
            os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(1)
