"""Scanning real failure output: the first failure, the ranks that waited, the diagnosis.

The `repro-*.log` files are the captured output of the reproductions in triage/repro, run
under torch 2.13 CPU/gloo (tests/test_log_repro.py runs them live); the NCCL excerpts are real
logs quoted in public issue threads and in the knowledge seeds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner, scan_lines
from triage.core.logscan.verdict import Verdict, decide
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


def verdict_for(kb: KnowledgeBase, *texts: tuple[str, str]) -> Verdict:
    scanner = Scanner(compile_signatures(kb))
    for name, text in texts:
        scanner.feed_block(scanner.source(name), text.encode(), 1)
    return decide(scanner.scan, kb)


@pytest.mark.parametrize(
    ("name", "entry", "first_rank", "waiting"),
    [
        ("repro-D1.log", "D1", None, []),
        ("repro-D4.log", "D4", None, []),
        ("repro-D20.log", "D20", 1, [0]),
        ("repro-MN3.log", "MN3", 0, []),
        ("repro-D19.log", "D19", 0, []),
        ("repro-D9.log", "D9", None, None),
        ("repro-D8.log", "D8", None, None),
    ],
)
def test_reproduction_output(
    kb: KnowledgeBase, name: str, entry: str, first_rank: int | None, waiting: list[int] | None
) -> None:
    verdict = verdict_for(kb, (name, (DATA / name).read_text()))
    assert verdict.found
    assert verdict.diagnoses[0].entry_id == entry
    if first_rank is not None or entry in ("D1", "D4"):
        assert verdict.first_rank == first_rank
    if waiting is not None:
        assert verdict.waiting_ranks == waiting


def test_straggler_is_named_as_the_rank_that_never_reported(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, ("mn3.log", (DATA / "repro-MN3.log").read_text()))
    assert verdict.first is not None and verdict.first.echo
    assert verdict.suspect_ranks == [1]


def test_torchrun_root_cause_is_not_trusted_over_time_order(kb: KnowledgeBase) -> None:
    """torchrun names the first process it saw exit; the scan names the first that failed."""
    verdict = verdict_for(kb, ("d20.log", (DATA / "repro-D20.log").read_text()))
    assert verdict.root_cause_rank == 1
    assert verdict.first is not None and verdict.first.kind == "exception"
    assert "FloatingPointError" in verdict.first.text


NCCL_TIMEOUT = """\
[E ProcessGroupNCCL.cpp:488] Some NCCL operations have failed or timed out.
[E ProcessGroupNCCL.cpp:915] [Rank 1] NCCL watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=778778, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800413 milliseconds before timing out.
"""


def test_watchdog_timeout_alone_is_the_timeout_entry(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, ("nccl.log", NCCL_TIMEOUT))
    assert verdict.diagnoses[0].entry_id == "MN3"
    assert verdict.first_rank == 1


def test_a_rank_error_before_the_timeouts_takes_the_lead(kb: KnowledgeBase) -> None:
    """D20's picture across two nodes: rank 3 on node B raises and node B's agent reports it at
    10:00; ranks 0-2 on node A wait out the 30-minute NCCL timeout."""
    node_b = (
        "[rank3]: Traceback (most recent call last):\n"
        '[rank3]:   File "train.py", line 88, in <module>\n'
        "[rank3]: ValueError: sample 1234 has an empty label list\n"
        "E1122 10:00:02.000000 4242 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: 1) local_rank: 3 (pid: 77) of binary: /usr/bin/python3\n"
    )
    node_a = "".join(
        f"[rank{r}]:[E1122 10:30:02.{r}00000 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=10, NumelOut=10, Timeout(ms)=1800000) "
        f"ran for 1800042 milliseconds before timing out.\n"
        for r in range(3)
    )
    # Node A's file comes first: only the timestamps can put rank 3 first.
    verdict = verdict_for(kb, ("node-a.log", node_a), ("node-b.log", node_b))
    assert verdict.ordered_by == "time"
    assert verdict.first_rank == 3
    assert verdict.waiting_ranks == [0, 1, 2]
    assert verdict.diagnoses[0].entry_id == "D20"
    assert "MN3" in [d.entry_id for d in verdict.diagnoses[1:3]]


def test_an_unrelated_traceback_is_no_known_failure(kb: KnowledgeBase) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "prep.py", line 3, in <module>\n'
        "KeyError: 'label_column'\n"
    )
    verdict = verdict_for(kb, ("prep.log", text))
    assert not verdict.found
    assert verdict.first is not None and verdict.first.kind == "exception"


def test_scan_lines_and_blocks_agree(kb: KnowledgeBase) -> None:
    text = (DATA / "repro-D20.log").read_text()
    signatures = compile_signatures(kb)
    by_lines = scan_lines(signatures, (("a", n, t) for n, t in enumerate(text.splitlines(), 1)))
    scanner = Scanner(signatures)
    scanner.feed_block(scanner.source("a"), text.encode(), 1)
    assert [(e.line, e.kind, e.entry_id) for e in by_lines.events] == [
        (e.line, e.kind, e.entry_id) for e in scanner.scan.events
    ]
    assert by_lines.lines == scanner.scan.lines == len(text.splitlines())


@pytest.mark.slow  # a stress test: a flood of hits
def test_events_stay_bounded_on_a_flood_of_hits(kb: KnowledgeBase) -> None:
    line = "[rank1]: RuntimeError: Connection closed by peer [127.0.0.1]:1234\n"
    scanner = Scanner(compile_signatures(kb))
    source = scanner.source("flood")
    for start in range(1, 60_001, 10_000):
        scanner.feed_block(source, (line * 10_000).encode(), start)
    assert scanner.scan.lines == 60_000
    assert scanner.scan.hits >= 60_000
    assert len(scanner.scan.events) <= 5_000 + 50
