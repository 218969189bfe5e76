"""The log engine on session 12c's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import canonical_collective
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


def test_new_group_is_a_call_every_rank_must_make() -> None:
    assert canonical_collective("new_group") == "new_group"
    assert canonical_collective("_new_group_with_tag") is None  # torch's helper below it is no second name


def test_a_group_made_on_rank_0_only_is_a_rank_conditional_collective(kb: KnowledgeBase) -> None:
    # rank 0 sits in new_group (gloo's connect to a peer that never comes) while rank 1 waits in the
    # barrier after it: the two never pair up (D21), not a timeout that was too short (MN3)
    log = str(_item("metrics_group_rank0_only.py")["log"])
    assert "in new_group" in log and "dist.barrier()" in log
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "D21", verdict.diagnoses[:3]
