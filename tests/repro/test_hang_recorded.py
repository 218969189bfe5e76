"""`triage hang` with what a real hung job recorded about itself: Flight Recorder dumps written by a
gloo job, torch.distributed.debug's server (its dump folder and its page), and the fall-back to
them when py-spy may not read the ranks (a seccomp filter denies it the memory of other processes,
as a container without SYS_PTRACE does). One job serves every test of this module."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.repro import noptrace
from triage.repro.hangs import HANGS, hung_job
from triage.repro.runner import free_port, processes_with_token

pytestmark = pytest.mark.slow
SCENARIO = HANGS[0]  # D21: rank 0 in a barrier under `if rank == 0:`, rank 1 in all_reduce
PYSPY = Path(sys.executable).with_name("py-spy")


@dataclass
class Job:
    launcher: int
    port: int
    debug_dir: Path
    fr_dir: Path
    denied: Path  # a py-spy that may not read other processes


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Job]:
    root = tmp_path_factory.mktemp("recorded")
    fr_dir, debug_dir = root / "fr", root / "debug"
    fr_dir.mkdir()
    denied = root / "py-spy"
    denied.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{noptrace.__file__}" "{PYSPY}" "$@"\n')
    denied.chmod(denied.stat().st_mode | stat.S_IEXEC)
    port = free_port()
    env = {
        "TORCH_FR_BUFFER_SIZE": "64",
        "TORCH_FR_DUMP_TEMP_FILE": str(fr_dir / "rank_"),
        "TRIAGE_DEBUG_SERVER_PORT": str(port),
        "TRIAGE_DEBUG_DUMP_DIR": str(debug_dir),
    }
    with hung_job(SCENARIO, env=env, recorders=True) as hung:
        yield Job(hung.launcher_pid, port, debug_dir, fr_dir, denied)
        token = hung.token
    assert processes_with_token(token) == []


def _hang(*args: str, pyspy: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRIAGE_HANG_SELF": "1"}
    if pyspy is not None:
        env["TRIAGE_PY_SPY"] = str(pyspy)
    return subprocess.run(
        [sys.executable, "-m", "triage", "hang", *args],
        capture_output=True, text=True, cwd=REPO, timeout=90, check=False, env=env,
    )  # fmt: skip


def _json(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert isinstance(data, dict)
    return data


def _d21(data: dict[str, object]) -> None:
    diagnoses = data["diagnoses"]
    assert isinstance(diagnoses, list) and diagnoses[0]["id"] == "D21", data["verdict"]
    assert data["suspect_ranks"] == [0]
    ranks = data["ranks"]
    assert isinstance(ranks, list)
    zero = next(r for r in ranks if r["rank"] == 0)
    assert zero["collective"] == "barrier"
    assert zero["user_frame"]["file"].endswith(SCENARIO.script)
    assert zero["user_frame"]["line"] == SCENARIO.suspect_line()


def test_the_jobs_flight_recorder_agrees_with_the_stacks(job: Job) -> None:
    data = _json(_hang("--json", "--pid", str(job.launcher)))
    _d21(data)
    recorded = data["recorded"]
    assert "rank 0 waits in barrier #1" in recorded and "rank 1 waits in all_reduce #1" in recorded
    assert "the Flight Recorder agrees with the stacks for ranks 0, 1" in recorded
    assert (
        "Flight Recorder: the ranks disagree on collective #1: their collective sequences diverged"
        in (
            data["diagnoses"][0]["evidence"]  # type: ignore[index]
        )
    )


def test_the_same_dumps_read_from_a_folder_give_the_same_picture(job: Job) -> None:
    data = _json(_hang("--json", "--fr-dir", str(job.fr_dir), "--pid", str(job.launcher)))
    assert data["recorded"] == _json(_hang("--json", "--pid", str(job.launcher)))["recorded"]


@pytest.mark.skipif(not noptrace.supported(), reason="the seccomp filter is written for x86_64 Linux")
def test_without_ptrace_the_debug_servers_dump_folder_stands_in(job: Job) -> None:
    data = _json(
        _hang("--json", "--debug-dir", str(job.debug_dir), "--pid", str(job.launcher), pyspy=job.denied)
    )
    _d21(data)
    notes = data["notes"]
    assert any("from the job's debug server" in n and "stacks_" in n for n in notes)  # type: ignore[union-attr]


@pytest.mark.skipif(not noptrace.supported(), reason="the seccomp filter is written for x86_64 Linux")
def test_without_ptrace_the_debug_servers_page_stands_in(job: Job) -> None:
    url = f"http://127.0.0.1:{job.port}"
    done = _hang("--debug-url", url, "--pid", str(job.launcher), pyspy=job.denied)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Verdict: rank 0 ")
    assert any(line.startswith("Diagnosis: D21") for line in lines)
    assert any(f"debug server {url}" in line for line in lines)


@pytest.mark.skipif(not noptrace.supported(), reason="the seccomp filter is written for x86_64 Linux")
def test_without_ptrace_the_flight_recorder_stands_in(job: Job) -> None:
    data = _json(_hang("--json", "--pid", str(job.launcher), pyspy=job.denied))
    _d21(data)
    notes = data["notes"]
    assert any("ptrace" in n and "Flight Recorder instead" in n for n in notes)  # type: ignore[union-attr]


@pytest.mark.skipif(not noptrace.supported(), reason="the seccomp filter is written for x86_64 Linux")
def test_without_ptrace_and_nothing_recorded_one_line_names_the_cause_and_fix(job: Job) -> None:
    done = _hang("--no-recorded", "--pid", str(job.launcher), pyspy=job.denied)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "ptrace is not permitted" in line and "SYS_PTRACE" in line


def test_without_py_spy_one_line_says_so_and_how_to_get_it(job: Job) -> None:
    done = _hang("--no-recorded", "--pid", str(job.launcher), pyspy=job.denied.with_name("absent"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "is not an executable py-spy" in line and line.startswith("triage: error:"), line


def test_the_walk_looks_at_the_running_job_and_branches_on_it(job: Job) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "triage", "walk", "--answer", "what_do_you_see=3", "--answer", "hang_mid=6",
         "--probe-timeout", "30", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=90, check=False,
        env={**os.environ, "TRIAGE_HANG_SELF": "1", "TRIAGE_HANG_PID": str(job.launcher)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["leaf"]["id"] == "D21"
    step = data["trail"][-1]
    assert (step["node"], step["answer"], step["via"]) == ("live_hang_probe", "d21", "fact")
    (probe,) = data["probes"]
    assert probe["name"] == "hang" and probe["facts"]["hang.suspects"] == [0]


def test_the_app_runs_the_hang_probe_in_its_child_process(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from probes.runners import ProcessProbes
    from triage.kb.loader import load_kb
    from triage.tui.app import make_app
    from triage.tui.result_screen import ResultScreen

    monkeypatch.setenv("TRIAGE_HANG_PID", str(job.launcher))
    monkeypatch.setenv("TRIAGE_HANG_SELF", "1")

    async def walk() -> tuple[str, str]:
        app = make_app(load_kb(), ProcessProbes())
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("3", "6")
            for _ in range(600):  # the probe runs in a child process; wait for its answer
                await pilot.pause(0.1)
                if isinstance(app.screen, ResultScreen):
                    break
            screen = app.screen
            assert isinstance(screen, ResultScreen), app.session.position
            record = app.session.records[-1]
            assert record.result is not None
            return screen.entry.id, record.result.summary

    entry, summary = asyncio.run(walk())
    assert entry == "D21" and summary.startswith("rank 0 is in a collective that only some ranks reach")


def test_the_report_gets_a_section_on_the_hung_job(job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    from datetime import datetime

    from triage.cli.hang import report_part
    from triage.kb.loader import load_kb
    from triage.render.report import ReportInput, build_report

    monkeypatch.setenv("TRIAGE_HANG_PID", str(job.launcher))
    monkeypatch.setenv("TRIAGE_HANG_SELF", "1")
    part = report_part(argparse.Namespace(timeout=10.0))
    assert part is not None and part.entries[0] == "D21"
    assert part.how.startswith("from triage hang: rank 0 is in a collective")
    report = build_report(load_kb(), ReportInput(datetime.now(), "node1", "triage report", extras=[part]))
    assert "Hung job on this machine" in report and "| 0 (suspect) |" in report
    assert "the Flight Recorder agrees with the stacks for ranks 0, 1" in report


def test_py_spy_missing_is_one_line(job: Job) -> None:
    done = _hang("--no-recorded", "--pid", str(job.launcher), pyspy=Path("/nonexistent/py-spy"))
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "is not an executable py-spy" in line


def test_dataloader_workers_are_not_ranks_and_the_idle_rank_is_recorded(tmp_path: Path) -> None:
    scenario = HANGS[2]  # MN3: rank 1 stalls reading a sample, here in a DataLoader worker
    env = {
        "HANG_LOADER_WORKERS": "2",
        "TORCH_FR_BUFFER_SIZE": "64",
        "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "rank_"),
    }
    with hung_job(scenario, env=env, recorders=True) as hung:
        workers = [p for p in processes_with_token(hung.token) if _parent_is_rank(p)]
        data = _json(_hang("--json", "--pid", str(hung.launcher_pid)))
    assert len(workers) >= 2  # the DataLoader workers exist, and carry RANK
    ranks = data["ranks"]
    assert isinstance(ranks, list) and sorted(r["rank"] for r in ranks) == [0, 1]
    assert not {r["pid"] for r in ranks} & set(workers)
    assert data["diagnoses"][0]["id"] == "MN3" and data["suspect_ranks"] == [1]  # type: ignore[index]
    assert any(line.startswith("rank 1 has no collective in flight") for line in data["recorded"])  # type: ignore[union-attr]
    assert "the Flight Recorder agrees with the stacks for ranks 0, 1" in data["recorded"]  # type: ignore[operator]


def _parent_is_rank(pid: int) -> bool:
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        env = Path(f"/proc/{ppid}/environ").read_bytes().split(b"\0")
    except (OSError, IndexError, ValueError):
        return False
    return any(v.startswith(b"LOCAL_RANK=") for v in env)
