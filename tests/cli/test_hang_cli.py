"""`triage hang` refusals: each a single line and exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def _triage(*args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    prefix = ["setpriv", f"--reuid={user}", "--regid=65534", "--clear-groups"] if user else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "triage", "hang", *args],
        capture_output=True, text=True, cwd=REPO, timeout=60, check=False,
        env={**os.environ, "TRIAGE_HANG_SELF": "1"},
    )  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.fixture
def sleeping_rank() -> object:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"},
    )
    time.sleep(0.3)
    yield proc
    proc.kill()
    proc.wait()


def test_a_pid_that_is_not_a_rank_is_refused() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        line = _one_line_error(_triage("--pid", str(proc.pid)))
    finally:
        proc.kill()
        proc.wait()
    assert "not a rank" in line or "none of the processes" in line


def test_a_pid_that_does_not_exist_is_refused() -> None:
    assert "does not exist" in _one_line_error(_triage("--pid", "999999999"))


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to act as another user"
)
def test_another_users_job_names_the_cause_and_the_fix(sleeping_rank: subprocess.Popen[bytes]) -> None:
    line = _one_line_error(_triage("--pid", str(sleeping_rank.pid), user="nobody"))
    assert "another user" in line and "job's user" in line


def test_merge_refuses_a_file_that_is_not_its_json(tmp_path: Path) -> None:
    bad = tmp_path / "node1.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert "triage hang --json" in _one_line_error(_triage("merge", str(bad)))
    garbage = tmp_path / "node2.json"
    garbage.write_bytes(b"\xff\xfe\x00binary")
    assert "node2.json" in _one_line_error(_triage("merge", str(garbage)))
    assert "no such file" in _one_line_error(_triage("merge", str(tmp_path / "missing.json")))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert "not a regular file" in _one_line_error(_triage("merge", str(fifo)))


def test_bad_timeouts_are_refused() -> None:
    for value in ("nan", "inf", "0", "-1"):
        assert "--timeout" in _one_line_error(_triage("--timeout", value, "--pid", "1"))
