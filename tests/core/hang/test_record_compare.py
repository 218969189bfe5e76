"""The ranks' Flight Recorders side by side, against the stacks, and in place of unreadable stacks."""

from __future__ import annotations

from tests.core.hang.test_hang_analysis import SCRIPT, SOURCE, _collective, _sample
from triage.core.hang.analyse import analyse, with_ras
from triage.core.hang.classify import classify
from triage.core.hang.record_compare import agreement, compare
from triage.core.hang.recorded import RankRecord, RecordedOp, op_name, ops_from_dump
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import RankSample


def _record(rank: int, *ops: tuple[str, int, bool], frames_line: int = 0) -> RankRecord:
    made = []
    for name, seq, pending in ops:
        frames = _collective(name, frames_line) if pending and frames_line else ()
        made.append(RecordedOp(seq, name, "", pending, "scheduled", frames=frames))
    contexts = {f"{SCRIPT}:{frames_line}": line_context(SOURCE, frames_line)} if frames_line else {}
    return RankRecord(rank, f"rank_{rank}", tuple(made), world_size=2, contexts=contexts)


def test_profiling_names_become_the_python_names() -> None:
    assert op_name("gloo:all_reduce") == "all_reduce"
    assert op_name("nccl:_allgather_base") == "all_gather_into_tensor"
    assert op_name("nccl:ALLREDUCE") == "all_reduce"


def test_gloo_entries_are_pending_until_retired_nccl_until_completed() -> None:
    ops = ops_from_dump(
        {"version": "2.10", "entries": [
            {"collective_seq_id": 4, "profiling_name": "gloo:all_reduce", "state": "scheduled", "retired": True},
            {"collective_seq_id": 5, "profiling_name": "gloo:barrier", "state": "scheduled", "retired": False},
            {"collective_seq_id": 6, "profiling_name": "nccl:all_reduce", "state": "completed", "retired": False},
            {"collective_seq_id": 7, "profiling_name": "nccl:broadcast", "state": "started", "retired": False},
        ]}
    )  # fmt: skip
    assert [o.pending for o in ops] == [False, True, False, True]
    record = RankRecord(0, "x", ops)
    assert record.waiting_in() == ops[3] and record.last_done() == ops[2]


def test_a_rank_with_nothing_in_flight_is_the_one_the_others_wait_for() -> None:
    findings = compare(
        [_record(0, ("all_reduce", 9, False), ("all_reduce", 10, True)), _record(1, ("all_reduce", 9, False)),
         _record(2, ("all_reduce", 10, True))]
    )  # fmt: skip
    assert findings.mismatch == "idle" and findings.suspects == (1,)
    assert "rank 1 has no collective in flight (its last finished: all_reduce #9)" in findings.lines


def test_same_sequence_id_different_collective_is_a_divergence() -> None:
    findings = compare(
        [
            _record(0, ("barrier", 3, True)),
            _record(1, ("all_reduce", 3, True)),
            _record(2, ("all_reduce", 3, True)),
        ]
    )
    assert findings.mismatch == "different" and findings.suspects == (0,)
    assert findings.lines[0] == "ranks 1, 2 wait in all_reduce #3"


def test_different_sequence_ids_mean_a_skipped_collective() -> None:
    findings = compare([_record(0, ("all_reduce", 7, True)), _record(1, ("all_reduce", 6, True))])
    assert findings.mismatch == "behind" and findings.suspects == ()  # one against one: no majority
    assert "different sequence ids" in findings.lines[-1]


def test_every_rank_in_the_same_collective_is_consistent() -> None:
    findings = compare([_record(0, ("all_reduce", 3, True)), _record(1, ("all_reduce", 3, True))])
    assert findings == compare([_record(1, ("all_reduce", 3, True)), _record(0, ("all_reduce", 3, True))])
    assert findings.mismatch == "" and findings.lines == ("ranks 0, 1 wait in all_reduce #3",)


def test_records_agree_or_disagree_with_the_stacks_rank_by_rank() -> None:
    states = [
        classify(_sample(0, *_collective("barrier", 8))),
        classify(_sample(1, *_collective("all_reduce", 13))),
    ]
    same = agreement(states, [_record(0, ("barrier", 1, True)), _record(1, ("all_reduce", 1, True))])
    assert same == ("the Flight Recorder agrees with the stacks for ranks 0, 1",)
    other = agreement(states, [_record(0, ("barrier", 1, True)), _record(1, ("all_reduce", 1, False))])
    assert other[0].endswith("rank 0") and "rank 1: its stack is waiting in all_reduce()" in other[1]
    assert "has nothing in flight" in other[1]


def test_unreadable_stacks_are_read_from_the_records() -> None:
    denied = "cannot read the stack of process 100: ptrace is not permitted"
    samples = [
        RankSample(pid=100, host="n1", rank=0, world_size=2, local_world_size=2, error=denied),
        RankSample(pid=101, host="n1", rank=1, world_size=2, local_world_size=2, error=denied),
    ]
    records = [
        _record(0, ("barrier", 1, True), frames_line=8),
        _record(1, ("all_reduce", 1, True), frames_line=13),
    ]
    picture = analyse(samples, records)
    assert picture.diagnoses[0].entry == "D21" and picture.suspect_ranks == (0,)
    assert picture.ranks[0].user_frame is not None and picture.ranks[0].user_frame.line == 8
    assert any(e.startswith("Flight Recorder: the ranks disagree") for e in picture.diagnoses[0].evidence)
    assert not any("agrees" in line for line in picture.recorded)  # no stack was read to agree with


def test_records_alone_make_a_picture() -> None:
    picture = analyse(
        [], [_record(0, ("all_reduce", 5, True), frames_line=13), _record(1, ("all_reduce", 4, False))]
    )
    assert picture.verdict.startswith("rank 1 has no collective in flight")
    assert picture.diagnoses[0].entry == "MN3" and picture.suspect_ranks == (1,)


def test_ras_alone_names_the_lagging_ranks_and_adds_to_a_stack_picture() -> None:
    lines = ("NCCL RAS, communicator #0-0 (x): rank 3 launched operations up to 10, the others further",)
    alone = with_ras(analyse([]), lines, (3,))
    assert alone.suspect_ranks == (3,) and alone.diagnoses[0].entry == "MN3"
    stacks = analyse([_sample(0, *_collective("barrier", 8)), _sample(1, *_collective("all_reduce", 13))])
    both = with_ras(stacks, lines, (3,))
    assert both.suspect_ranks == (0,) and both.recorded == lines
