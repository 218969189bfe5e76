"""The log engine on session 13c's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import RankReader
from triage.core.model import KnowledgeBase


def test_a_worker_error_reraised_as_runtime_error_is_a_rank_that_failed(kb: KnowledgeBase) -> None:
    # a DataLoader worker of rank 1 hit a record that does not parse; JSONDecodeError cannot be
    # rebuilt from its message, so torch re-raises it with `raise RuntimeError(msg)` in torch/_utils.py:
    # that raise refuses no call, and rank 0's lost peer echoes rank 1's failure (D20), not a
    # memory-killed worker (X4) read from the words of the message
    log = str(_item("eval_worker_corrupt_rank1_python.py")["log"])
    assert "raise RuntimeError(msg) from None" in log
    assert "RuntimeError: Caught JSONDecodeError in DataLoader worker process 1." in log
    verdict = verdict_for(kb, log)
    assert verdict.found and verdict.diagnoses[0].entry_id == "D20", verdict.diagnoses[:3]
    assert verdict.first is not None and verdict.first.rank == 1 and not verdict.first.refused


def _refused(lines: list[str]) -> bool:
    reader = RankReader()
    for number, line in enumerate(lines[:-1], 1):
        reader.feed(0, number, 1, line)
    name, _, message = lines[-1].partition(": ")
    block = reader.exception(0, len(lines), 1, name, message)
    assert block is not None
    return block.refused


def test_only_torch_s_own_raise_with_a_check_class_refuses_a_call() -> None:
    frames = [
        "Traceback (most recent call last):",
        '  File "/work/train.py", line 42, in main',
        "    for x, _ in loader:",
        '  File "/venv/lib/python3.11/site-packages/torch/_utils.py", line 793, in reraise',
        "    raise RuntimeError(msg) from None",
    ]
    assert not _refused([*frames, "RuntimeError: Caught JSONDecodeError in DataLoader worker process 1."])
    assert _refused(
        [*frames, "RuntimeError: Argument ``gather_list`` must be specified on destination rank."]
    )
