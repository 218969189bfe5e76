"""The log engine on session 12b's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.heads import from_heads
from triage.core.logscan.static_errors import static_error
from triage.core.model import KnowledgeBase


def test_a_tensor_of_the_wrong_rank_or_dtype_is_the_code_as_written() -> None:
    assert static_error("RuntimeError", "0D or 1D target tensor expected, multi-target not supported")
    assert static_error("RuntimeError", "Expected 4-dimensional input for 4-dimensional weight [8, 3, 3, 3]")
    assert static_error("RuntimeError", "expected scalar type Float but found Double")
    assert static_error("RuntimeError", "Found dtype Long but expected Float")
    # a size may come from one rank's data (a short last batch, a bad sample): left to the other rules
    assert not static_error("RuntimeError", "mat1 and mat2 shapes cannot be multiplied (8x19 and 20x32)")
    assert not static_error("RuntimeError", "The size of tensor a (4) must match the size of tensor b (3)")
    # the words quoted inside another message are no such error
    assert not static_error("RuntimeError", "Error in worker: expected scalar type Float but found Double")


def test_a_loss_refusing_the_target_under_mp_spawn_is_no_diverged_rank(kb: KnowledgeBase) -> None:
    # mp.spawn shows only the first process's traceback and stops the other: with an error every
    # rank makes alike, that rank did not diverge (D20)
    verdict = verdict_for(kb, str(_item("ce_target_column_spawn.py")["log"]))
    assert verdict.first is not None and verdict.first.refused
    assert not verdict.found, verdict.diagnoses[:3]


def test_the_lines_of_a_multi_line_exception_are_no_duplicated_output(kb: KnowledgeBase) -> None:
    log = str(_item("load_renamed_layer_per_rank.py")["log"])
    assert "\tMissing key(s) in state_dict" in log
    assert from_heads([log]) == []
    assert not verdict_for(kb, log).found
    # the same indented lines printed by the program, with no exception above them, still count
    progress = "\n".join(f"  epoch {e} validation accuracy 0.{e}1 loss 2.3{e}" for e in range(3))
    assert [i.entry_id for i in from_heads([progress + "\n" + progress])] == ["D23"]
    # and so do the program's lines once an exception's indented continuation has ended
    block = 'RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s): "head.weight".\n'
    plain = progress.replace("  epoch", "epoch")
    assert [i.entry_id for i in from_heads([block + plain + "\n" + block + plain])] == ["D23"]


def test_the_launchers_options_rejected_by_the_scripts_argparse_is_no_launcher(kb: KnowledgeBase) -> None:
    verdict = verdict_for(kb, str(_item("python_with_launcher_flags.py")["log"]))
    assert verdict.found and verdict.diagnoses[0].entry_id == "D1", verdict.diagnoses[:3]
    # torchrun's own parser rejecting an option (an older torchrun) is no script's argparse: no
    # signature reads it (the query engine may still read its words)
    for line in (
        "torchrun: error: unrecognized arguments: --nproc-per-node=1",
        "launch.py: error: unrecognized arguments: --nproc-per-node=2",
    ):
        older = verdict_for(kb, line)
        assert not older.found or older.by_query_engine, older.diagnoses[:3]
