"""Watching the processes a real triage command starts: its process tree, the processes that carry
a test's marker in their environment, and the dist ranks (which carry TRIAGE_DIST_RUN)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.probes.helpers import MARKER_ENV, REPO, triage_env

RANK_ENV = "TRIAGE_DIST_RUN"


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time in clock ticks) of a live process, or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def threads(pid: int) -> int:
    """How many threads process `pid` runs (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def descendants(root: int) -> set[tuple[int, int]]:
    """Every live descendant of `root` as (pid, start time), so a reused pid is not mistaken."""
    children: dict[int, list[tuple[int, int]]] = {}
    for pid in _pids():
        info = _stat(pid)
        if info is not None and info[1] != "Z":
            children.setdefault(info[0], []).append((pid, info[2]))
    found: set[tuple[int, int]] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def alive(processes: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The (pid, start time) pairs still running (zombies count as gone)."""
    left = set()
    for pid, started in processes:
        info = _stat(pid)
        if info is not None and info[2] == started and info[1] != "Z":
            left.add((pid, started))
    return left


def marked(marker: str, *, ranks_only: bool = False) -> list[int]:
    """Live processes carrying MARKER_ENV=marker (and, with ranks_only, a dist rank's variable)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        environ = _environ(pid)
        if needle not in environ or (
            ranks_only and not any(v.startswith(RANK_ENV.encode()) for v in environ)
        ):
            continue
        info = _stat(pid)
        if info is not None and info[1] != "Z":
            found.append(pid)
    return found


def wait_until(condition: object, within_s: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(step)
    return bool(condition())  # type: ignore[operator]


@dataclass
class Run:
    """A `python -m triage ...` started for a fault test, and what it left."""

    proc: subprocess.Popen[bytes]
    marker: str
    tree: set[tuple[int, int]] = field(default_factory=set)

    def snapshot(self) -> None:
        self.tree |= descendants(self.proc.pid)

    def signal(self, signum: int) -> None:
        self.snapshot()
        self.proc.send_signal(signum)

    def leftovers(self, within_s: float = 5.0) -> tuple[set[tuple[int, int]], list[int]]:
        """(descendants still alive, marked processes still alive) after up to `within_s`."""
        wait_until(lambda: not alive(self.tree) and not marked(self.marker), within_s)
        return alive(self.tree), marked(self.marker)

    def cleanup(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait()
        for pid in {p for p, _ in alive(self.tree)} | set(marked(self.marker)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def start(marker: str, *args: str, stdin: bytes | None = None, **env: str) -> Run:
    proc = subprocess.Popen(
        [sys.executable, "-m", "triage", *args],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=triage_env(**{MARKER_ENV: marker}, **env),
        cwd=REPO,
    )
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.close()
        proc.stdin = None  # communicate() must not flush it again
    return Run(proc, marker)
