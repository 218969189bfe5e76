"""What `triage log` prints: counts that agree, each evidence line once, no launcher boilerplate as
evidence, scores on ask's 0-1 scale, the ranks at a glance, and an exit status the pipe cannot change."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, CliResult

Run = Callable[..., CliResult]
DATA = REPO / "tests" / "core" / "logscan" / "data"
LOGS = sorted(DATA.glob("repro-*.log"))
# One line that several signatures of several entries match (a watchdog timeout names all of them).
MANY_SIGNATURES = (
    "[rank0]:[E1122 04:12:07.467 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
    "600010 milliseconds before timing out.\n"
)


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_counts_evidence_and_scores(run_cli: Run, log: Path) -> None:
    data = json.loads(run_cli("log", "--json", "--top", "5", str(log)).stdout)
    assert 0 < data["signature_lines"] <= data["lines"]
    assert data["signature_hits"] >= data["signature_lines"]
    for diagnosis in data["diagnoses"]:
        assert 0.0 <= diagnosis["score"] <= 1.0
        places = [(e["source"], e["line"]) for e in diagnosis["evidence"]]
        assert len(places) == len(set(places)), diagnosis["id"]
    for closest in data["closest"]:
        assert 0.0 <= closest["score"] <= 1.0
    text = run_cli("log", "--top", "5", str(log)).stdout.decode()
    scores = [float(s) for s in re.findall(r"score (\d+\.\d+)", text)]
    assert scores and all(0.0 <= s <= 1.0 for s in scores)
    evidence = (
        text.split("  evidence:\n", 1)[1].split("\n\n", 1)[0].splitlines() if "  evidence:" in text else []
    )
    assert len(evidence) == len(set(evidence))


def test_a_line_many_signatures_match_counts_once(run_cli: Run, tmp_path: Path) -> None:
    log = tmp_path / "watchdog.log"
    log.write_text("step 1\n" + MANY_SIGNATURES * 3 + "step 2\n")
    data = json.loads(run_cli("log", "--json", str(log)).stdout)
    assert data["lines"] == 5
    assert data["signature_lines"] == 3 < data["signature_hits"]
    text = run_cli("log", str(log)).stdout.decode()
    assert text.startswith("Scanned 1 file, 5 lines: 3 lines with a known signature")


def test_launcher_boilerplate_is_not_evidence_for_the_diagnosis(run_cli: Run) -> None:
    data = json.loads(run_cli("log", "--json", str(DATA / "repro-D20.log")).stdout)
    best = data["diagnoses"][0]
    assert best["id"] == "D20"
    texts = [e["text"] for e in best["evidence"]]
    assert texts[0] == "FloatingPointError: loss is nan at step 3"
    assert not any(
        "error_file" in t or "ChildFailedError" in t or "Root Cause (first observed" in t for t in texts
    ), texts
    text = run_cli("log", str(DATA / "repro-D20.log")).stdout.decode()
    shown = text.split("  evidence:\n", 1)[1].split("\n\n", 1)[0]
    assert "error_file" not in shown


def test_the_ranks_at_a_glance(run_cli: Run) -> None:
    text = run_cli("log", str(DATA / "repro-D20.log")).stdout.decode()
    picture = text.split("Ranks at a glance\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert picture[0].split() == ["rank", "state", "when", "last"]
    rows = {line.split()[0]: line for line in picture[1:]}
    assert "FIRST FAIL" in rows["1"] and "FloatingPointError" in rows["1"]
    assert "waited" in rows["0"]
    data = json.loads(run_cli("log", "--json", str(DATA / "repro-MN3.log")).stdout)
    states = {row["rank"]: row["state"] for row in data["ranks"]}
    assert states == {0: "timeout", 1: "suspect"}  # rank 0 timed out waiting for silent rank 1


def test_many_waiting_ranks_are_named_as_ranges(run_cli: Run, tmp_path: Path) -> None:
    """A job of hundreds of ranks that all time out: the text names them as ranges, the JSON lists them."""
    log = tmp_path / "wide.log"
    log.write_text(
        "".join(
            MANY_SIGNATURES.replace("rank0", f"rank{r}").replace("Rank 0", f"Rank {r}") for r in range(300)
        )
    )
    text = run_cli("log", str(log)).stdout.decode()
    (waited,) = [line for line in text.splitlines() if line.startswith("Ranks that only waited for it:")]
    assert waited == "Ranks that only waited for it: 1-299.", waited
    data = json.loads(run_cli("log", "--json", str(log)).stdout)
    assert data["waiting_ranks"] == list(range(1, 300))


def _status_through_head(log: Path) -> int:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "triage", "log", "--top", "50", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # `| head -1`: read one line, then go away
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"Exception ignored" not in err, err
    return proc.returncode


def test_the_exit_status_does_not_depend_on_the_pipe(tmp_path: Path) -> None:
    quiet = tmp_path / "quiet.log"
    quiet.write_text("".join(f"[rank{i % 8}]: step {i} loss 0.{i % 97:02d}\n" for i in range(50_000)))
    statuses = {_status_through_head(quiet) for _ in range(4)}
    assert statuses == {1}  # no failure in it: 1, however fast the reader leaves
    assert _status_through_head(DATA / "repro-D20.log") == 0
