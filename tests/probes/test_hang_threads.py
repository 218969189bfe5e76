"""Ranks read from real py-spy dumps (tests/fixtures/hang/pyspy): a collective waited for in a
thread other than the main one, a collective hidden inside a library call (dcp.save), an object
collective (broadcast_object_list, a broadcast inside), a rank blocked in a C call (flock), an exception swallowed around a collective."""

from __future__ import annotations

import json
from pathlib import Path

from probes.hang.pyspy import parse_dump
from triage.core.hang.analyse import analyse
from triage.core.hang.classify import classify, in_distributed
from triage.core.hang.codec import merge, picture_json
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, RankSample, ThreadStack

DUMPS = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "pyspy"


def _rank(name: str, rank: int, threads: bool = True) -> RankSample:
    text = (DUMPS / f"{name}_rank{rank}.json").read_text(encoding="utf-8").replace("{SCRIPTS}", str(DUMPS))
    dump = parse_dump(text, 100 + rank)
    others = dump.threads if threads else ()
    frames = (*dump.frames, *(f for t in others for f in t.frames))
    contexts = {
        f.where(): line_context(Path(f.file + ".txt").read_text(encoding="utf-8"), f.line)
        for f in frames
        if f.file.startswith(str(DUMPS))
    }
    return RankSample(
        pid=100 + rank, host="n1", rank=rank, world_size=2, local_world_size=2, frames=dump.frames,
        active=dump.active, contexts=contexts, launcher="torchrun", threads=others,
    )  # fmt: skip


def test_the_main_thread_is_the_stack_and_the_other_threads_are_kept() -> None:
    sample = _rank("D21-thread", 0)
    assert [f.function for f in sample.frames][:2] == ["Thread._wait_for_tstate_lock", "Thread.join"]
    assert [t.name for t in sample.threads] == ["saver"] and in_distributed(sample.threads[0].frames)
    assert not in_distributed(sample.frames)


def test_a_collective_in_a_thread_while_the_main_thread_joins_it_is_the_rank_s_wait() -> None:
    state = classify(_rank("D21-thread", 0))
    assert (state.kind, state.collective) == ("collective", "barrier")
    assert state.user_frame is not None and state.user_frame.function == "save_and_sync"
    assert "thread 'saver'" in state.via and "hang_thread.py:30" in state.via
    # without the saver thread, the same rank is only idle: the thread is what makes it a wait
    assert classify(_rank("D21-thread", 0, threads=False)).kind == "waiting"


def test_the_thread_s_collective_under_the_main_thread_s_rank_test_is_d21() -> None:
    picture = analyse([_rank("D21-thread", 0), _rank("D21-thread", 1)])
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,)
    assert "rank == 0 and step == 2" in picture.verdict


def test_a_busy_or_stuck_main_thread_is_not_replaced_by_a_thread_s_collective() -> None:
    sample = _rank("D21-thread", 0)
    busy = RankSample(
        pid=1, host="n1", rank=0, frames=(Frame("step", "/job/train.py", 3),), active=True,
        threads=sample.threads,
    )  # fmt: skip
    assert classify(busy).kind == "computing"
    stuck = RankSample(
        pid=1, host="n1", rank=0, frames=(Frame("read", "/job/train.py", 3),), threads=sample.threads
    )  # a main thread stuck at its own line (a read, a lock) is the story, whatever a thread does
    assert classify(stuck).kind == "waiting"
    idle_thread = ThreadStack("pin_memory", (Frame("get", "/usr/lib/python3.11/queue.py", 171),))
    assert classify(RankSample(pid=1, host="n1", rank=0, threads=(idle_thread,))).kind == "waiting"


def test_a_collective_inside_dcp_save_is_named_as_called_and_by_whom() -> None:
    state = classify(_rank("D21-dcp", 0))
    # all_gather inside gather_object: the collective the caller asked for is gather_object
    assert (state.collective, state.via) == ("gather_object", "inside torch.distributed.checkpoint")
    picture = analyse([_rank("D21-dcp", 0), _rank("D21-dcp", 1)])
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,)


def test_an_object_collective_is_named_as_called_not_by_the_broadcast_inside_it() -> None:
    state = classify(_rank("D21-object", 0))
    assert (state.kind, state.collective, state.via) == ("collective", "broadcast_object_list", "")
    picture = analyse([_rank("D21-object", 0), _rank("D21-object", 1)])
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,)
    assert "broadcast_object_list()" in picture.diagnoses[0].evidence[0]


def test_a_rank_blocked_in_a_c_call_is_the_straggler_at_its_own_line() -> None:
    """flock() leaves no Python frame: the rank's innermost frame is the line that calls it."""
    state = classify(_rank("MN3-lock", 1))
    assert state.kind == "waiting" and state.user_frame is not None and state.user_frame.line == 24
    picture = analyse([_rank("MN3-lock", 0), _rank("MN3-lock", 1)])
    assert picture.diagnoses[0].entry == "MN3" and picture.suspect_ranks == (1,)


def test_a_rank_past_a_try_whose_except_swallowed_its_error_skipped_the_collective_in_it() -> None:
    picture = analyse([_rank("D19-swallowed", 0), _rank("D19-swallowed", 1)])
    assert [d.entry for d in picture.diagnoses][:1] == ["D19"] and picture.suspect_ranks == (1,)
    assert "the `except` at line 27 swallowed it" in picture.diagnoses[0].evidence[0]
    merged, _ = merge([json.loads(json.dumps(picture_json(picture, 2)))])  # `triage hang merge` reads it too
    assert merged.suspect_ranks == (1,) and merged.diagnoses[0].entry == "D19"
    # a handler that raises again lets no rank past: the source decides, not the stacks alone
    source = (DUMPS / "hang_swallowed.py.txt").read_text(encoding="utf-8")
    assert line_context(source, 26).swallowed == (24, 27, 28)
    assert line_context(source.replace("pass", "raise"), 26).swallowed is None
