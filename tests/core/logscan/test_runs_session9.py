"""The log engine on session 9's stored real output (eval/runs/train.yaml; no torch launched here).

A worker that torchrun reports dead of SIGTERM (exit -15) while torchrun sent SIGTERM only to the
other workers was stopped from outside the job (X3), not by the launcher's teardown; the same error
printed by more than one process is every worker failing alike, not one rank that diverged.
"""

from __future__ import annotations

import re

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase


@pytest.mark.parametrize("setting", ["default", "loglevel-info"])
def test_sigterm_the_launcher_never_sent_is_a_kill_from_outside(kb: KnowledgeBase, setting: str) -> None:
    log = str(_item("sigterm_rank1.py", setting)["log"])
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "X3", verdict.diagnoses[:3]
    assert verdict.first_rank == 1
    assert 0 in verdict.waiting_ranks


def test_sigterm_the_launcher_sent_is_its_own_teardown(kb: KnowledgeBase) -> None:
    log = str(_item("sigterm_rank1.py")["log"])
    dead = re.search(r"exitcode: -15\) local_rank: 1 \(pid: (\d+)\)", log)
    assert dead is not None
    # the same log, had torchrun itself sent the SIGTERM that ended rank 1
    sending = re.search(r"^.*Sending process (\d+) closing signal SIGTERM$", log, re.MULTILINE)
    assert sending is not None
    also = sending[0].replace(sending[1], dead[1])
    sent = log.replace(sending[0], f"{sending[0]}\n{also}", 1)
    ids = [d.entry_id for d in verdict_for(kb, sent).diagnoses]
    assert "X3" not in ids


def test_one_error_printed_by_every_process_is_no_diverged_rank(kb: KnowledgeBase) -> None:
    log = str(_item("init_timeout_int.py")["log"])
    verdict = verdict_for(kb, log)
    assert not verdict.found or verdict.diagnoses[0].entry_id != "D20", verdict.diagnoses[:3]
    # with one of the two identical tracebacks gone, one worker failed alone while torchrun
    # stopped the other: the diverged rank again
    first = log.index("Traceback (most recent call last)")
    second = log.index("Traceback (most recent call last)", first + 1)
    alone = log[:first] + log[second:]
    # (torch's own check raised this one: a call refused as written is no diverged rank either,
    # so the check is moved into the user's code for this)
    own = alone.replace('torch/distributed/distributed_c10d.py", line 854', 'mylib/config.py", line 854')
    assert own != alone
    verdict = verdict_for(kb, own)
    assert verdict.found and verdict.diagnoses[0].entry_id == "D20", verdict.diagnoses[:3]
    refused = verdict_for(kb, alone)
    assert not refused.found or refused.diagnoses[0].entry_id != "D20", refused.diagnoses[:3]


def test_a_job_interrupted_by_hand_with_no_error_of_its_own_was_hung(kb: KnowledgeBase) -> None:
    log = str(_item("ctrl_c_hung_barrier.py")["log"])
    verdict = verdict_for(kb, log)
    top = verdict.diagnoses[0]
    assert verdict.found and top.entry_id == "D19", verdict.diagnoses[:3]
    assert "interrupted" in top.reason and "rank 1 in backward" in top.reason
    # the worker's own bare `KeyboardInterrupt`, not torchrun's SignalException, is where rank 1 stopped
    assert verdict.first is not None and verdict.first.text == "KeyboardInterrupt"
    # an error of the job's own before the interrupt: the interrupt only came after the failure
    failed = log.replace("epoch 0 saved\n", "epoch 0 saved\nZeroDivisionError: division by zero\n", 1)
    assert all("interrupted" not in d.reason for d in verdict_for(kb, failed).diagnoses)


def test_a_process_mp_spawn_reports_dead_of_sigterm_was_killed_from_outside(kb: KnowledgeBase) -> None:
    log = str(_item("spawn_rank_killed.py")["log"])
    assert "terminated with signal SIGKILL" in log
    # mp.spawn stops the others with SIGTERM itself but reports only the first to die
    verdict = verdict_for(kb, log.replace("terminated with signal SIGKILL", "terminated with signal SIGTERM"))
    top = verdict.diagnoses[0]
    assert verdict.found and top.entry_id == "X3" and "did not send" in top.reason, verdict.diagnoses[:3]
    assert verdict.first_rank == 1
