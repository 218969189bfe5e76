"""The log engine on session 9b's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import re

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.addresses import reached_addresses
from triage.core.logscan.scanner import Event
from triage.core.model import KnowledgeBase


def test_a_literal_ip_that_c10d_knocked_on_is_a_route_not_a_name(kb: KnowledgeBase) -> None:
    log = str(_item("worker_node_unreachable_master.py")["log"])
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "P1", verdict.diagnoses[:3]
    assert verdict.first is not None and "errno: 101" in verdict.first.text


def test_per_address_lines_naming_another_host_leave_the_name_as_the_story(kb: KnowledgeBase) -> None:
    log = str(_item("worker_node_unreachable_master.py")["log"])
    # the same log, had the rendezvous address been reverse-resolved to a name that c10d then tried
    renamed = re.sub(r"(\[::ffff:)?10\.255\.255\.1\]?:41021 \(errno", "gpu-17.internal:41021 (errno", log)
    assert renamed != log
    verdict = verdict_for(kb, renamed)
    assert verdict.found and verdict.diagnoses[0].entry_id == "E13", verdict.diagnoses[:3]


def _hit(line: int, text: str) -> Event:
    return Event("hit", 0, line, None, None, text, entry_id="X", weight=0.6)


def test_only_the_summary_of_a_knocked_address_becomes_an_echo() -> None:
    knock = _hit(1, "failed to connect to [::ffff:10.1.2.3]:29500 (errno: 111 - Connection refused).")
    same = _hit(2, "The client socket has failed to connect to any network address of (10.1.2.3, 29500).")
    other_port = _hit(
        3, "The client socket has failed to connect to any network address of (10.1.2.3, 29501)."
    )
    named = _hit(4, "The client socket has failed to connect to any network address of (master-0, 29500).")
    out = reached_addresses([knock, same, other_port, named])
    assert [e.echo for e in out] == [False, True, False, False]
    assert reached_addresses([same, named]) == [same, named]  # nothing knocked: unchanged


def test_the_statement_of_a_failed_assert_names_the_check(kb: KnowledgeBase) -> None:
    log = str(_item("allreduce_sum_exact_assert.py")["log"])
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "P9", verdict.diagnoses[:3]
    assert verdict.first_rank == 0
    # the same failure under an assert that checks something else: one rank failed first (D20)
    other = log.replace("assert torch.equal(total, reference)", "assert total.item() < 0")
    assert other != log
    ids = [d.entry_id for d in verdict_for(kb, other).diagnoses]
    assert ids and ids[0] == "D20" and "P9" not in ids, ids


def test_a_matched_statement_over_another_exception_is_only_where_the_rank_was(kb: KnowledgeBase) -> None:
    log = str(_item("allreduce_sum_exact_assert.py")["log"])
    raised = log.replace("AssertionError: all_reduce result", "RuntimeError: all_reduce result")
    assert raised != log
    ids = [d.entry_id for d in verdict_for(kb, raised).diagnoses]
    assert ids and ids[0] != "P9", ids
