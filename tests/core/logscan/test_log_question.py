"""`triage log` on a log with only symptoms (or none it can name): the candidates and the decision
graph's question that tells the first from the next (triage.core.separate, as `ask` asks it).

Stored real output only: one rank's watchdog timeout pasted alone (eval/logs part c), a duplicate-GPU
NCCL error, and a corrupt checkpoint read by one process (eval/logs part w)."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.conftest import REPO, CliResult

Run = Callable[..., CliResult]
DATA = REPO / "tests" / "core" / "logscan" / "data"


def test_a_bare_timeout_shows_the_question_with_its_candidates(run_cli: Run) -> None:
    log = DATA / "watchdog-timeout-only.log"  # one rank's timeout, nothing else
    data = json.loads(run_cli("log", "--json", str(log)).stdout)
    assert data["found"] and data["only_symptoms"]
    question = data["separating_question"]
    assert question is not None
    ids = [d["id"] for d in data["diagnoses"]]
    first, other = list(question["answers"])
    assert first == ids[0] and other in ids[1:]  # the lead against a listed candidate
    assert question["answers"][first] != question["answers"][other]
    text = run_cli("log", str(log)).stdout.decode()
    assert f"to tell {first} from {other}, answer: {question['prompt']}" in text


def test_no_finding_asks_about_its_closest_entries_only_when_there_are_two(run_cli: Run) -> None:
    data = json.loads(run_cli("log", "--json", str(DATA / "corrupt-checkpoint-one-process.log")).stdout)
    assert not data["found"] and [c["id"] for c in data["closest"]] == ["D23"]
    assert data["separating_question"] is None  # one candidate: nothing to tell it from


def test_a_finding_of_its_own_asks_nothing(run_cli: Run) -> None:
    data = json.loads(run_cli("log", "--json", str(DATA / "nccl-duplicate-gpu.log")).stdout)
    assert data["found"] and not data["only_symptoms"]
    assert data["separating_question"] is None
    assert "to tell " not in run_cli("log", str(DATA / "nccl-duplicate-gpu.log")).stdout.decode()
