"""The log engine on session 12's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.heads import from_heads
from triage.core.logscan.static_errors import static_error
from triage.core.model import KnowledgeBase


def test_errors_of_the_code_as_written() -> None:
    assert static_error("TypeError", "Cb.on_end() takes 2 positional arguments but 3 were given")
    assert static_error("TypeError", "f() missing 1 required positional argument: 'x'")
    assert static_error("TypeError", "__init__() got an unexpected keyword argument 'foo'")
    assert static_error("TypeError", "unsupported format string passed to Tensor.__format__")
    assert static_error("builtins.NameError", "name 'cfg' is not defined")
    assert static_error("AttributeError", "'Tensor' object has no attribute 'logits'. Did you mean: 'logit'?")
    # a None usually comes from the data, which may differ by rank; a module's missing name is a build's
    assert not static_error("AttributeError", "'NoneType' object has no attribute 'shape'")
    assert not static_error("AttributeError", "module 'torch._C' has no attribute '_cuda_setDevice'")
    # the same words under another class, or a class's other messages, are no such error
    assert not static_error("RuntimeError", "takes 2 positional arguments but 3 were given")
    assert not static_error("TypeError", "expected Tensor as element 0 in argument 0, but got int")


@pytest.mark.parametrize(
    ("script", "setting"),
    [
        ("trainer_outputs_logits_attr.py", "default"),
        ("trainer_outputs_logits_attr.py", "loglevel-info"),
        ("spawn_callback_signature.py", "default"),
        ("loss_format_two_nodes.py", "default"),
    ],
)
def test_a_bug_of_the_code_on_every_rank_names_no_entry(kb: KnowledgeBase, script: str, setting: str) -> None:
    # every rank runs the same code: the rank that printed it first did not diverge (D20), and the
    # query engine's reading of `attribute` or `format` names nothing
    verdict = verdict_for(kb, str(_item(script, setting)["log"]))
    assert verdict.first is not None and verdict.first.refused
    assert not verdict.found, verdict.diagnoses[:3]


def test_each_agents_summary_is_no_duplicated_output() -> None:
    # two torchrun agents (two nodes) each print their summary of the failure
    summary = "\n".join(
        [
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "============================================================",
            "eval/runs/scripts/train.py FAILED",
            "------------------------------------------------------------",
            "Failures:",
            "  <NO_OTHER_FAILURES>",
            "Root Cause (first observed failure):",
        ]
    )
    assert from_heads([summary + "\n" + summary]) == []
    # the same lines printed by the user's program still count
    progress = "\n".join(f"epoch {e} validation accuracy 0.{e}1 loss 2.3{e}" for e in range(3))
    assert [i.entry_id for i in from_heads([progress + "\n" + progress])] == ["D23"]


@pytest.mark.parametrize("setting", ["default", "cpp-info"])
def test_every_rank_creating_one_sqlite_table_is_every_rank_saving(kb: KnowledgeBase, setting: str) -> None:
    log = str(_item("metrics_sqlite_every_rank.py", setting)["log"])
    verdict = verdict_for(kb, log)
    assert verdict.diagnoses[0].entry_id == "D23", verdict.diagnoses[:3]
    assert verdict.first_rank == 1
