"""`triage hang` ended by a signal while it reads a stack leaves no process behind: its py-spy runs
are children it tracks (their own session, a parent-death signal), so Ctrl-C, a SIGTERM or even a
SIGKILL of triage ends them too. The stand-in py-spy (`TRIAGE_PY_SPY`) never answers, as py-spy
does not on a process stuck in the kernel, so triage is always ended mid-read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow  # real processes and the real command, as the other hang tests


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_triage_hang_ended_mid_read_leaves_no_py_spy_behind(tmp_path: Path, sig: signal.Signals) -> None:
    started = tmp_path / "started"
    stand_in = tmp_path / "py-spy"
    stand_in.write_text(f"#!/bin/sh\necho $$ >> {started}\nexec sleep 60\n")
    stand_in.chmod(0o755)
    rank = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"},
    )
    triage = subprocess.Popen(
        [sys.executable, "-m", "triage", "hang", "--pid", str(rank.pid)],
        cwd=REPO,
        env={**os.environ, "TRIAGE_HANG_SELF": "1", "TRIAGE_PY_SPY": str(stand_in)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text().strip()) and time.monotonic() < deadline:
            assert triage.poll() is None, triage.stderr.read() if triage.stderr else ""
            time.sleep(0.05)
        spy = int(started.read_text().split()[0])
        assert _alive(spy)
        triage.send_signal(sig)
        triage.wait(timeout=15)
        deadline = time.monotonic() + 5
        while _alive(spy) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(spy), f"py-spy stand-in {spy} outlived triage ({sig.name})"
        if sig != signal.SIGKILL:
            err = triage.stderr.read().decode() if triage.stderr else ""
            assert "Traceback" not in err, err
    finally:
        for proc in (triage, rank):
            proc.kill()
            proc.wait()
