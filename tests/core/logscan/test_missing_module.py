"""A package the interpreter cannot import: an install problem (X6), unless only one rank lacks it.

Stored real output only: a paste from a user thread (eval/logs part x) where the DDP relaunch's
interpreter has no copy of the package, and two runs of eval/runs where every rank, or one rank
only, fails on the import.
"""

from __future__ import annotations

from pathlib import Path

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.model import KnowledgeBase

DATA = Path(__file__).resolve().parent / "data"


def test_a_package_missing_for_the_relaunch_is_an_install_problem(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, (DATA / "ddp-relaunch-module-missing.log").read_text(encoding="utf-8"))
    assert verdict.found and verdict.diagnoses[0].entry_id == "X6"
    assert not kb.entries["X6"].covered  # out of scope: the answer says so, it names no fix of ours


def test_every_rank_missing_the_package_is_an_install_problem(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, str(_item("missing_package_all_ranks.py")["log"]))
    assert verdict.diagnoses[0].entry_id == "X6"


def test_one_rank_missing_the_module_is_a_diverged_rank(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, str(_item("rank_path_import_missing.py")["log"]))
    assert verdict.diagnoses[0].entry_id == "D20" and verdict.first_rank == 1
    assert "X6" in [d.entry_id for d in verdict.diagnoses[1:]]
