"""The log engine on session 12c's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.static_errors import static_error
from triage.core.model import KnowledgeBase


def test_a_value_json_cannot_write_and_a_mutable_dataclass_default_are_the_code_as_written() -> None:
    assert static_error("TypeError", "Object of type Tensor is not JSON serializable")
    assert static_error("builtins.TypeError", "Object of type ndarray is not JSON serializable")
    assert static_error(
        "ValueError",
        "mutable default <class 'list'> for field milestones is not allowed: use default_factory",
    )
    # the words quoted inside another message, or another ValueError, are no such error
    assert not static_error("RuntimeError", "Object of type Tensor is not JSON serializable")
    assert not static_error("ValueError", "optimizer got an empty parameter list")
    assert not static_error("TypeError", "cannot pickle 'weakref' object")


def test_a_class_every_spawned_process_fails_to_define_is_no_diverged_rank(kb: KnowledgeBase) -> None:
    # mp.spawn shows one process's traceback and stops the other: the class statement fails alike
    # on every rank, so that process did not diverge (D20)
    verdict = verdict_for(kb, str(_item("dataclass_mutable_default_spawn.py")["log"]))
    assert verdict.first is not None and verdict.first.refused
    assert not verdict.found, verdict.diagnoses[:3]
