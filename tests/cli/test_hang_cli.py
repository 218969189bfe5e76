"""`triage hang` refusals: each a single line and exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import FIXTURES as ALL_FIXTURES
from tests.conftest import REPO

FIXTURES = ALL_FIXTURES / "hang"


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


def test_a_stray_argument_is_named_with_the_flag_meant() -> None:
    assert "--pid 4242" in _one_line_error(_triage("4242"))
    assert "'nodes'" in _one_line_error(_triage("nodes", "a.json"))
    assert "usage: triage hang merge" in _one_line_error(_triage("merge"))


def test_bad_timeouts_are_refused() -> None:
    for value in ("nan", "inf", "0", "-1"):
        assert "--timeout" in _one_line_error(_triage("--timeout", value, "--pid", "1"))


NOWHERE = "999999999"  # no such process: the picture comes from what the job recorded alone


def test_folders_and_addresses_given_that_cannot_be_read_are_refused(tmp_path: Path) -> None:
    assert (
        "no such file" in _one_line_error(_triage("--pid", NOWHERE, "--fr-dir", str(tmp_path / "no"))).lower()
    )
    assert "no Flight Recorder dumps" in _one_line_error(_triage("--pid", NOWHERE, "--fr-dir", str(tmp_path)))
    (tmp_path / "rank_0").write_bytes(b"\x80\x04garbage")
    assert "rank_0: not a Flight Recorder dump" in _one_line_error(_triage("--fr-dir", str(tmp_path)))
    assert "no stacks_<time>.txt" in _one_line_error(_triage("--pid", NOWHERE, "--debug-dir", str(tmp_path)))
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
    line = _one_line_error(_triage("--pid", NOWHERE, "--debug-url", f"http://127.0.0.1:{port}"))
    assert f"127.0.0.1:{port}/stacks" in line and "refused" in line
    assert "NCCL RAS is not answering" in _one_line_error(
        _triage("--pid", NOWHERE, "--ras", f"127.0.0.1:{port}")
    )
    assert "HOST:PORT" in _one_line_error(_triage("--pid", NOWHERE, "--ras", "localhost"))


def test_flight_recorder_dumps_alone_name_the_entry(tmp_path: Path) -> None:
    # The real dumps of the D21 reproduction, their frames pointed at the script as it was then.
    from probes.hang.flight_recorder import load_dump

    script = FIXTURES / "fr_d21" / "hang_rank0_barrier.py"

    for rank in (0, 1):
        dump = load_dump(FIXTURES / "fr_d21" / f"rank_{rank}")
        assert isinstance(dump, dict)
        for entry in dump["entries"]:
            for frame in entry.get("frames", []):
                if frame["filename"].endswith("hang_rank0_barrier.py"):
                    frame["filename"] = str(script)
        (tmp_path / f"rank_{rank}").write_text(json.dumps(dump))
    done = _triage("--json", "--pid", NOWHERE, "--fr-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["diagnoses"][0]["id"] == "D21" and data["suspect_ranks"] == [0], done.stdout
    zero = data["ranks"][0]
    assert (zero["rank"], zero["collective"], zero["user_frame"]["line"]) == (0, "barrier", 24)
    assert any("using what the job recorded" in n for n in data["notes"])


def test_nccl_ras_alone_names_the_lagging_ranks() -> None:
    from tests.probes.test_hang_ncclras import RAS, RasServer

    server = RasServer([(RAS / "docs_mismatch.txt").read_text()], json=False)
    try:
        done = _triage("--pid", NOWHERE, "--ras", f"127.0.0.1:{server.port}")
    finally:
        server.close()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Verdict: NCCL RAS: ranks 0, 2, 3, 4, 5, 7 launched fewer operations")
    assert any(line.startswith("Diagnosis: MN3") for line in lines)
