"""The log engine on session 11c's stored real output (eval/runs/train.yaml; no torch launched here)."""

from __future__ import annotations

import pytest

from tests.core.logscan.test_runs_outputs import _item
from tests.log_paste import verdict_for
from triage.core.logscan.blocks import RankReader
from triage.core.logscan.native_checks import is_call, native_refusal, torch_frame
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.model import KnowledgeBase

_TORCH = "/v/site-packages/torch/distributed/rendezvous.py"


def _block(quoted: str, name: str, message: str = "x") -> tuple[bool, bool]:
    """(refused, native_check) of a traceback whose innermost frame is torch's, quoting `quoted`."""
    reader = RankReader()
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/train.py", line 22, in train',
        "    dist.init_process_group('gloo', rank=rank, world_size=world_size)",
        f'  File "{_TORCH}", line 199, in _create_c10d_store',
        quoted,
    ]
    for number, line in enumerate(lines, 1):
        reader.feed(0, number, 0, line)
    block = reader.exception(0, len(lines) + 1, 0, name, message)
    assert block is not None
    return block.refused, block.native_check


def test_a_value_check_raised_by_a_bound_call_in_torch_is_a_native_check() -> None:
    assert _block("    return TCPStore(", "ValueError") == (False, True)
    assert _block("    return TCPStore(", "TypeError") == (False, True)
    # a timeout or a lost peer comes from C++ as RuntimeError: no check
    assert _block("    return TCPStore(", "RuntimeError") == (False, False)
    # a re-raise (a DataLoader worker's error) is no call
    assert _block("    raise exception", "ValueError") == (False, False)
    # torch's own Python check stays what it was: a refusal
    assert _block("    raise ValueError(", "ValueError") == (True, False)


def test_the_pieces() -> None:
    assert is_call("    store, rank, world_size = next(rendezvous_iterator)")
    assert not is_call("    raise ValueError(msg)")
    assert not is_call("           ^^^^^^^^^")
    assert native_refusal("ValueError", True) and not native_refusal("ValueError", False)
    assert torch_frame(f'  file "{_TORCH}", line 199, in f'.encode())
    assert not torch_frame(b'  file "/x/train.py", line 22, in train')


@pytest.mark.parametrize("setting", ["default", "cpp-info"])
def test_a_rank_outside_the_world_refused_by_the_store_is_no_crashed_rank(
    kb: KnowledgeBase, setting: str
) -> None:
    # mp.spawn handed the worker its arguments in another order: the store refuses world size 0
    log = str(_item("spawn_rank_world_swapped.py", setting)["log"])
    assert "TCPStore world size cannot be 0" in log
    verdict = verdict_for(kb, log)
    assert verdict.first is not None and verdict.first.native_check
    assert "D20" not in [d.entry_id for d in verdict.diagnoses[:1]], verdict.diagnoses[:3]


def test_both_ways_of_feeding_read_the_call_under_a_torch_frame(kb: KnowledgeBase) -> None:
    log = str(_item("spawn_rank_world_swapped.py")["log"])
    by_block = Scanner(compile_signatures(kb))
    by_block.feed_block(by_block.source("paste"), log.encode(), 1)
    by_line = Scanner(compile_signatures(kb))
    by_line.feed_lines(by_line.source("paste"), log.splitlines())
    for scanner in (by_block, by_line):
        checks = [e for e in scanner.finish().events if e.native_check]
        assert [e.text for e in checks] == ["ValueError: TCPStore world size cannot be 0"]


def test_a_worker_error_re_raised_by_torch_still_stops_one_rank(kb: KnowledgeBase) -> None:
    # the DataLoader worker's ValueError is re-raised (`raise exception`) in torch: a crashed rank
    verdict = verdict_for(kb, str(_item("loader_worker_raises_rank1.py")["log"]))
    assert verdict.diagnoses[0].entry_id == "D20" and verdict.first_rank == 1, verdict.diagnoses[:3]
