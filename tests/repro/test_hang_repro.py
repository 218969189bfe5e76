"""`triage hang` on real hung jobs: each reproduction freezes for real under torchrun (CPU/gloo);
the command must name the entry, the suspect ranks and the line they stopped at, and nothing of
the job may be left once it is ended."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import REPO
from triage.repro.hangs import HANGS, LAUNCHERS, HangScenario, hung_job
from triage.repro.runner import processes_with_token

pytestmark = pytest.mark.slow


def _hang(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "triage", "hang", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={**os.environ, "TRIAGE_HANG_SELF": "1"},
    )


def _a_rank(launcher: int, token: str) -> int:
    """The first rank process the launcher started (the PID a user picks from `top`)."""
    for pid in sorted(processes_with_token(token)):
        with open(f"/proc/{pid}/stat", "rb") as handle:
            if int(handle.read().rsplit(b")", 1)[-1].split()[1]) == launcher:
                return pid
    raise AssertionError(f"no rank process under launcher {launcher}")


@pytest.mark.parametrize("scenario", HANGS, ids=[h.id for h in HANGS])
def test_a_real_hang_is_named_with_its_suspects_and_line(scenario: HangScenario) -> None:
    with hung_job(scenario) as job:
        pid = _a_rank(job.launcher_pid, job.token) if scenario.rank_pid else job.launcher_pid
        done = _hang("--json", "--pid", str(pid))
        token = job.token
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    _assert_named(data, scenario)
    assert processes_with_token(token) == []


def _assert_named(data: dict[str, Any], scenario: HangScenario) -> None:
    """The entry first, the suspect ranks, and the line each rank stopped at (where it has one)."""
    why = json.dumps({k: data.get(k) for k in ("verdict", "suspect_ranks", "missing_ranks", "notes")})
    why += "".join(f"\n  rank {r['rank']}: {r['state']} {r['doing']}" for r in data["ranks"])
    assert data["diagnoses"] and data["diagnoses"][0]["id"] == scenario.expect, why
    assert data["suspect_ranks"] == list(scenario.suspects), why
    suspects = [r for r in data["ranks"] if r["rank"] in scenario.suspects]
    others = [r for r in data["ranks"] if r["rank"] not in scenario.suspects]
    if not scenario.running:  # no worker started: the launcher itself waits in its rendezvous
        assert [(r["rank"], r["state"], r["collective"]) for r in data["ranks"]] == [
            (None, "init", "rendezvous")
        ], why
        return
    if scenario.ended:  # a process, but its script is over: no line, the others wait for it
        assert len(data["ranks"]) == scenario.nproc and suspects, why
        assert all(r["state"] == "exited" and not r["user_frame"] for r in suspects), why
    elif scenario.gone:  # no process: listed as missing ranks of the world, not as ranks read
        assert data["missing_ranks"] == list(scenario.suspects) and suspects == []
        assert len(data["ranks"]) == scenario.running
    else:
        assert len(data["ranks"]) == scenario.nproc
        line = scenario.suspect_line()
        assert suspects and all(r["user_frame"]["line"] == line for r in suspects), suspects
        assert all(r["user_frame"]["file"].endswith(scenario.script) for r in suspects)
        if scenario.collective:
            assert all(r["collective"] == scenario.collective for r in suspects), why
    if scenario.marks_waiting:
        waiting = scenario.waiting_line()
        assert others and all(r["user_frame"]["line"] == waiting for r in others), others
        assert all(r["state"] in ("collective", "init") and r["collective"] for r in others), others


@pytest.mark.parametrize("launcher", LAUNCHERS[1:])
def test_a_hang_under_each_launcher_is_found_from_the_launcher(launcher: str) -> None:
    """`python -m torch.distributed.run` is the other tests' launcher; here `torchrun`,
    `accelerate launch` and `deepspeed` start the same job, and the launcher's PID leads to its
    ranks. DeepSpeed is no dependency of triage (its build wants torch at install time): the case
    runs where it is installed (on CPU it picks its CPU accelerator)."""
    if launcher in ("accelerate", "deepspeed"):
        pytest.importorskip(launcher)
    scenario = HANGS[0]
    with hung_job(scenario, launcher=launcher) as job:
        done = _hang("--json", "--pid", str(job.launcher_pid))
        token = job.token
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    _assert_named(data, scenario)
    assert {r["collective"] for r in data["ranks"]} == {"barrier", "all_reduce"}
    assert processes_with_token(token) == []


def test_plain_output_leads_with_the_verdict_and_marks_the_suspect() -> None:
    scenario = HANGS[0]
    with hung_job(scenario) as job:
        done = _hang("--pid", str(job.launcher_pid))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Verdict: rank 0 ")
    marked = [line for line in lines if line.startswith(" ! rank 0")]
    assert marked and "barrier()" in marked[0] and f"{scenario.script}:{scenario.suspect_line()}" in marked[0]
    assert any(line.startswith("Diagnosis: D21") for line in lines)
