"""triage.core.children: every child in its own session, tracked, killed with its owner, at exit,
and when triage itself dies (parent-death signal, watchdog). Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from triage.core import children

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal and /proc are Linux")

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _python(code: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def test_a_child_gets_its_own_session_and_the_parents_pid() -> None:
    proc = children.popen(
        [sys.executable, "-c", "import os; print(os.getsid(0), os.environ['TRIAGE_PARENT_PID'])"],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=30)
    children.reap(proc)
    session, parent = out.split()
    assert int(session) == proc.pid and int(parent) == os.getpid()
    assert children.live_count() == 0


def test_reap_ends_what_the_child_started() -> None:
    proc = children.popen(
        [
            sys.executable,
            "-c",
            f"import subprocess; p = subprocess.Popen({SLEEPER!r}); print(p.pid, flush=True)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    children.reap(proc)
    assert _gone(grandchild)


def test_killing_an_owner_ends_its_children_and_any_it_starts_later() -> None:
    owner, other = threading.Event(), threading.Event()
    mine, theirs = children.popen(SLEEPER, owner=owner), children.popen(SLEEPER, owner=other)
    try:
        assert children.kill_owned(owner) == 1
        assert _gone(mine.pid) and _alive(theirs.pid)
        late = children.popen(SLEEPER, owner=owner)
        assert _gone(late.pid), "a child started for an owner already ended must not live"
        late.wait()
    finally:
        for proc in (mine, theirs):
            children.reap(proc)


def test_children_die_at_exit_and_when_started_during_it() -> None:
    script = (
        "import atexit, subprocess, sys; from triage.core import children;"
        f"p = children.popen({SLEEPER!r}); print(p.pid, flush=True);"
        f"atexit.register(lambda: print(children.popen({SLEEPER!r}).pid, flush=True))"
    )
    parent = _python(script)
    out, _ = parent.communicate(timeout=30)
    first, late = (int(pid) for pid in out.split())
    assert _gone(first) and _gone(late)


@pytest.mark.parametrize("how", ["popen", "watchdog"])
def test_a_child_dies_with_a_killed_parent(how: str) -> None:
    """SIGKILL runs no clean-up: the parent-death signal (children.popen) or the child's own
    watchdog (children.watch_parent, for a Python child) must end it."""
    if how == "popen":
        start = f"p = children.popen({SLEEPER!r})"
    else:
        child = "from triage.core import children; children.watch_parent(); import time; time.sleep(60)"
        start = f"import os; p = subprocess.Popen([sys.executable, '-c', {child!r}], env=dict(os.environ, TRIAGE_PARENT_PID=str(os.getpid())))"
    parent = _python(
        f"import subprocess, sys, time; from triage.core import children; {start}; print(p.pid, flush=True); time.sleep(60)"
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    time.sleep(0.5)  # the watchdog is running
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert _gone(pid), f"child {pid} outlived its killed parent"


def test_sigterm_unwinds_through_finally() -> None:
    parent = _python(
        "import time; from triage.core.termination import install_signal_handlers, Terminated\n"
        "install_signal_handlers()\n"
        "try:\n    print('ready', flush=True); time.sleep(60)\n"
        "except Terminated as exc:\n    print('unwound', exc.signum)\n"
    )
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "ready"
    parent.send_signal(signal.SIGTERM)
    out, _ = parent.communicate(timeout=10)
    assert out.split() == ["unwound", str(int(signal.SIGTERM))]
