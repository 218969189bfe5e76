"""The log engine on session 11's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import RankReader
from triage.core.logscan.nested import spawned_under_launcher
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Event, Scan, Scanner
from triage.core.logscan.unprefixed import bare_owner
from triage.core.model import KnowledgeBase


def _scan(kb: KnowledgeBase, text: str) -> Scan:
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), text.encode(), 1)
    return scanner.finish()


def test_a_traceback_record_put_in_torchruns_summary_is_that_workers(kb: KnowledgeBase) -> None:
    # --redirects 3: the terminal holds only the summary, whose `traceback :` is rank 1's own
    log = str(_item("accum_steps_per_rank.py")["log"])
    lost = [e for e in _scan(kb, log).events if "Connection closed by peer" in e.text]
    assert lost and all(e.rank == 1 for e in lost)
    verdict = verdict_for(kb, log)
    # rank 1 lost its peer and torchrun saw no other failure: the peer had run out of batches
    assert verdict.diagnoses[0].entry_id == "D9" and verdict.first_rank == 1, verdict.diagnoses[:3]


def test_the_summary_traceback_ends_where_its_indent_does(kb: KnowledgeBase) -> None:
    log = str(_item("accum_steps_per_rank.py")["log"]).rstrip("\n")
    after = "RuntimeError: Connection closed by peer [127.0.0.1]:999 (printed after the summary)"
    hits = [e for e in _scan(kb, f"{log}\n{after}\n").events if "printed after the summary" in e.text]
    assert hits and all(e.rank is None for e in hits)


def test_a_class_defined_on_one_rank_only_cannot_be_unpickled_on_the_others(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, str(_item("broadcast_object_class_rank0.py")["log"]))
    assert verdict.diagnoses[0].entry_id == "E14" and verdict.first_rank == 1, verdict.diagnoses[:3]


@pytest.mark.parametrize("setting", ["default", "cpp-info"])
def test_a_bare_error_belongs_to_the_rank_that_did_not_only_wait(kb: KnowledgeBase, setting: str) -> None:
    # rank 1's prefetch thread died (no `[rank1]:` on a thread's traceback); rank 0 timed out
    # waiting, and torchrun's summary names rank 0 as its root cause: the first to exit
    verdict = verdict_for(kb, str(_item("prefetch_thread_dies_rank1.py", setting)["log"]))
    assert verdict.first_rank == 1 and verdict.diagnoses[0].entry_id == "D20", verdict.diagnoses[:3]


def _event(kind: str, rank: int | None, echo: bool = False) -> Event:
    return Event(kind, 0, 1, rank, None, "RuntimeError: x", echo=echo)


def test_a_bare_error_is_nobodys_when_two_ranks_are_silent_or_one_failed_on_its_own() -> None:
    bare = _event("exception", None)
    waited = _event("exception", 0, echo=True)
    assert bare_owner(bare, [bare, waited], {0, 1}) == 1
    assert bare_owner(bare, [bare, waited], {0, 1, 2}) is None
    assert bare_owner(bare, [bare, waited, _event("exception", 2)], {0, 1, 2}) is None
    assert bare_owner(bare, [bare], {0, 1}) is None  # no rank prefixes at all: not this rule's


def test_workers_spawning_workers_under_torchrun_is_one_launcher_too_many(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, str(_item("spawn_under_torchrun.py")["log"]))
    assert verdict.diagnoses[0].entry_id == "D1", verdict.diagnoses[:3]
    assert "mp.spawn" in verdict.diagnoses[0].reason


def test_mp_spawn_alone_is_no_nested_launch(kb: KnowledgeBase) -> None:
    log = str(_item("recursion_spawn_rank1.py")["log"])
    scan = _scan(kb, log)
    assert scan.spawn_failed is not None
    assert spawned_under_launcher(scan.events, scan) == []


def _torch_block(message: str) -> bool:
    reader = RankReader()
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/train.py", line 20, in main',
        "    dist.scatter(out, chunks, src=0)",
        '  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 4778, in scatter',
        "    work = group.scatter(output_tensors, input_tensors, opts)",
    ]
    for number, line in enumerate(lines, 1):
        reader.feed(0, number, 0, line)
    block = reader.exception(0, len(lines) + 1, 0, "RuntimeError", message)
    return block is not None and block.refused


def test_c10ds_own_argument_check_refuses_the_call_a_lost_peer_does_not() -> None:
    assert _torch_block("ProcessGroupGloo::scatter: Incorrect input list size 3. Input list size should be 2")
    assert not _torch_block("[/w/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4519")


def test_a_scatter_list_of_the_wrong_length_is_a_call_refused_not_a_diverged_rank(kb: KnowledgeBase) -> None:
    # rank 0's list is refused by ProcessGroupGloo; rank 1 only lost its peer: no distributed fault
    verdict = verdict_for(kb, str(_item("scatter_list_length.py")["log"]))
    assert not verdict.found or verdict.diagnoses[0].entry_id != "D20", verdict.diagnoses[:3]
