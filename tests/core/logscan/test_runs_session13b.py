"""The log engine on session 13b's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import re

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase


def test_a_rename_whose_temporary_file_another_rank_moved_is_every_rank_saving(kb: KnowledgeBase) -> None:
    # every rank runs the write-then-`os.replace` save into one directory; rank 0's replace finds the
    # shared `.tmp` already moved by rank 1, and rank 1 then loses its peer: the concurrent writers
    # (D23), not a rank that diverged with an error of its own (D20)
    log = str(_item("ckpt_atomic_replace_every_rank.py")["log"])
    assert "No such file or directory: '/tmp/r13b_ckpt/last.pt.tmp' -> " in log
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "D23", verdict.diagnoses[:3]


def test_a_file_missing_for_opening_is_no_concurrent_write(kb: KnowledgeBase) -> None:
    # only the rename's two-path form names a source another writer moved; one path is a file that
    # was never there (a wrong resume path, a missing shard)
    patterns = [re.compile(s.pattern) for s in kb.entries["D23"].signatures]
    missing = "[rank1]: FileNotFoundError: [Errno 2] No such file or directory: '/ckpt/step_200/model.pt'"
    moved = "FileNotFoundError: [Errno 2] No such file or directory: '/o/last.pt.tmp' -> '/o/last.pt'"
    assert not any(p.search(missing) for p in patterns)
    assert any(p.search(moved) for p in patterns)
