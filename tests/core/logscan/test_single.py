"""Lines that blame several processes (knowledge `several: true`), in a log that shows one.

Stored real output only: two pastes from user threads (eval/logs part w) where one process read a
checkpoint that was never whole, and the two-rank run of eval/runs where both ranks saved to one path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.single import HINT_FACTOR, shows_several
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize(
    "name",
    [
        "corrupt-checkpoint-one-process.log",  # a single-GPU trainer resuming from a truncated file
        "corrupt-checkpoint-spawn-process0.log",  # mp.spawn's process 0 loading a bad download
    ],
)
def test_a_corrupt_checkpoint_read_by_one_process_is_no_finding(kb: KnowledgeBase, name: str) -> None:
    verdict = verdict_for(kb, (DATA / name).read_text(encoding="utf-8"))
    assert not verdict.found and not verdict.by_query_engine
    # the racing-writers entry stays the closest, with what would make it the answer
    entry, _, why = verdict.closest[0]
    assert entry == "D23" and "one process" in why


def test_the_same_error_from_two_ranks_saving_one_path_is_d23(kb: KnowledgeBase) -> None:
    item = _item("save_same_path_all_ranks.py")
    verdict = verdict_for(kb, str(item["log"]))
    assert verdict.found and verdict.diagnoses[0].entry_id == "D23"
    assert verdict.diagnoses[0].score >= 1.0  # full weight: both ranks are in the log


def test_the_hint_keeps_the_entry_below_a_finding(kb: KnowledgeBase) -> None:
    text = (DATA / "corrupt-checkpoint-one-process.log").read_text(encoding="utf-8")
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), text.encode(), 1)
    hits = [e for e in scanner.scan.events if e.kind == "hit" and e.entry_id == "D23"]
    assert hits and all(e.several for e in hits)
    assert not shows_several(scanner.scan)
    assert max(e.weight for e in hits) * HINT_FACTOR < 0.4


def test_the_shipped_file_race_signatures_are_marked(kb: KnowledgeBase) -> None:
    marked = [s.pattern for s in kb.entries["D23"].signatures if s.several]
    assert any("central directory" in p for p in marked)
    assert any("PytorchStreamReader" in p for p in marked)
