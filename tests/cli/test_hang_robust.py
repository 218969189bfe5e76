"""`triage hang` on many ranks, on ranks that exit while they are read, under the launchers people
use, and with secrets on the lines it prints: real processes (plain Python ranks, no torch), real
py-spy, the real command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.hang import read_rank
from probes.hang.discover import read_proc
from probes.hang.sources import Sources
from tests.conftest import REPO
from triage.core.hang.analyse import analyse

pytestmark = pytest.mark.slow  # real rank processes, read by py-spy (the tier of the hang reproductions)

TOKEN = "hf_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
RANK = textwrap.dedent(
    f"""\
    import time
    def wait_for_data():
        time.sleep(600)  # fetch("https://user:pw@host/x?token={TOKEN}")
    wait_for_data()
    """
)
# A launcher: starts `world` ranks with the variables torchrun sets, and waits for them.
LAUNCHER = textwrap.dedent(
    """\
    import os, subprocess, sys
    world = int(os.environ["TEST_WORLD"])
    ranks = [
        subprocess.Popen([sys.executable, os.environ["TEST_RANK_SCRIPT"]], env={
            **os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999"})
        for r in range(world)
    ]
    for rank in ranks:
        rank.wait()
    """
)


def _triage(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triage", "hang", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
        env={**os.environ, "TRIAGE_HANG_SELF": "1"},
    )  # fmt: skip


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(world: int, argv: list[str] | None = None) -> subprocess.Popen[bytes]:
        rank = tmp_path / "train.py"
        rank.write_text(RANK)
        script = tmp_path / "launcher.py"
        script.write_text(LAUNCHER)
        command = [sys.executable, str(script)] if argv is None else [sys.executable, *argv]
        for name in {Path(a).name for a in (argv or [])[:1]}:
            (tmp_path / name).write_text(LAUNCHER)  # a launcher script by the name people run
        env = {**os.environ, "TEST_WORLD": str(world), "TEST_RANK_SCRIPT": str(rank)}
        proc = subprocess.Popen(command, env=env, cwd=tmp_path, start_new_session=True)
        started.append(proc)
        deadline = time.monotonic() + 60
        while len(_children(proc.pid)) < world and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # let the ranks reach their sleep
        return proc

    yield start
    for proc in started:
        for child in _children(proc.pid):
            os.kill(child, 9)
        proc.kill()
        proc.wait()


def test_sixteen_ranks_are_all_read(launch: object) -> None:
    proc = launch(16)  # type: ignore[operator]
    done = _triage("--json", "--pid", str(proc.pid))
    assert done.returncode == 1, done.stderr  # sleeping ranks: nothing in a collective
    data = json.loads(done.stdout)
    ranks = data["ranks"]
    assert sorted(r["rank"] for r in ranks) == list(range(16))
    assert {r["state"] for r in ranks} == {"waiting"}
    assert all(r["user_frame"]["function"] == "wait_for_data" for r in ranks)
    assert [g["ranks"] for g in data["groups"]] == [list(range(16))]


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["accelerate", "launch", "--num_processes", "2", "train.py"], "accelerate launch"),
        (["deepspeed", "--num_gpus", "2", "train.py"], "deepspeed"),
        (["torchrun", "--nproc-per-node", "2", "train.py"], "torchrun"),
    ],
)
def test_the_launcher_is_named(launch: object, argv: list[str], name: str) -> None:
    proc = launch(2, argv)  # type: ignore[operator]
    data = json.loads(_triage("--json", "--pid", str(proc.pid)).stdout)
    assert len(data["ranks"]) == 2
    assert f"launched by {name} (PID {proc.pid})" in data["notes"]


def test_secrets_on_the_lines_it_prints_are_redacted(launch: object) -> None:
    proc = launch(2)  # type: ignore[operator]
    plain = _triage("--pid", str(proc.pid))
    as_json = _triage("--json", "--pid", str(proc.pid))
    for out in (plain.stdout, as_json.stdout):
        assert "train.py:3" in out and "time.sleep(600)" in out
        assert TOKEN not in out and ":pw@" not in out and "<redacted>" in out


def test_ranks_that_exit_while_they_are_read_are_gone_not_unreadable(launch: object) -> None:
    proc = launch(2)  # type: ignore[operator]
    ranks = [read_proc(pid) for pid in _children(proc.pid)]
    assert all(r is not None for r in ranks)
    for child in _children(proc.pid):
        os.kill(child, 9)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    samples = [read_rank(r, "n1", 5.0, deadline, Sources()) for r in ranks if r is not None]
    assert all(s.gone and s.error for s in samples)
    picture = analyse(samples)
    assert {s.kind for s in picture.ranks} == {"exited"}
    assert picture.verdict == "the job's processes exited while triage read them: nothing is hung now"
    assert picture.diagnoses == ()


def test_a_rank_left_a_zombie_is_gone_not_unreadable(launch: object) -> None:
    proc = launch(2)  # type: ignore[operator]
    ranks = [read_proc(pid) for pid in _children(proc.pid)]
    assert all(r is not None for r in ranks)
    os.kill(proc.pid, 19)  # SIGSTOP: the launcher cannot reap, so the killed ranks stay zombies
    try:
        deadline = time.monotonic() + 10
        while _state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        for child in _children(proc.pid):
            os.kill(child, 9)
        time.sleep(0.5)
        assert [_state(r.pid) for r in ranks if r] == ["Z", "Z"]
        deadline = time.monotonic() + 10
        samples = [read_rank(r, "n1", 5.0, deadline, Sources()) for r in ranks if r is not None]
        assert all(s.gone and s.error for s in samples)
    finally:
        os.kill(proc.pid, 18)  # SIGCONT


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
