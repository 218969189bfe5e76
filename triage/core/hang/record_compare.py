"""Reading the ranks' Flight Recorders side by side, and checking them against the stacks.

Each rank's record says which collective it waits in (the latest one issued and not finished) and
its sequence id in its process group. Across ranks: the same id with different collectives is a
mismatch (their sequences diverged); different ids mean a rank is behind or ahead; a rank with
nothing in flight while the others wait is the one they wait for. The stacks say the same thing
from the other side, so the two are compared rank by rank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from triage.core.hang.classify import RankState, classify
from triage.core.hang.recorded import RankRecord, RecordedOp
from triage.core.hang.stacks import RankSample

WAITING = ("collective", "init")


@dataclass(frozen=True)
class RecordFindings:
    """What the records say: one line per kind of rank, the odd ranks out, the kind of mismatch."""

    lines: tuple[str, ...] = ()
    suspects: tuple[int, ...] = ()
    mismatch: str = ""  # "" | "different" (same id, other collective) | "behind" | "idle"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in sorted(ranks))


def _minority(groups: dict[tuple[object, ...], list[int]]) -> tuple[int, ...]:
    """The ranks outside the largest group, when one group is the largest."""
    sizes = sorted((len(v) for v in groups.values()), reverse=True)
    if len(sizes) < 2 or sizes[0] == sizes[1]:
        return ()
    largest = max(groups.values(), key=len)
    return tuple(sorted(r for v in groups.values() if v is not largest for r in v))


def compare(records: Sequence[RankRecord]) -> RecordFindings:
    """Compare the ranks' records: what each waits in, and who differs."""
    if not records:
        return RecordFindings()
    waiting: dict[tuple[object, ...], list[int]] = {}
    idle: list[int] = []
    last: dict[int, RecordedOp | None] = {}
    for record in records:
        op = record.waiting_in()
        if op is None:
            idle.append(record.rank)
            last[record.rank] = record.last_done()
        else:
            waiting.setdefault((op.group, op.seq, op.op), []).append(record.rank)
    lines = [
        f"{_ranks(ranks)} {'waits' if len(ranks) == 1 else 'wait'} in {op} #{seq}"
        + (f" of group {group}" if group else "")
        for (group, seq, op), ranks in sorted(waiting.items(), key=lambda kv: (-len(kv[1]), kv[1]))
    ]
    for rank in sorted(idle):
        done = last[rank]
        lines.append(
            f"rank {rank} has no collective in flight"
            + (f" (its last finished: {done.label()})" if done else " (none recorded)")
        )
    if waiting and idle:
        return RecordFindings(tuple(lines), tuple(sorted(idle)), "idle")
    if len(waiting) < 2:
        return RecordFindings(tuple(lines))
    by_seq: dict[tuple[object, ...], list[int]] = {}
    for (group, seq, _), ranks in waiting.items():
        by_seq.setdefault((group, seq), []).extend(ranks)
    if len(by_seq) == 1:
        (group, seq), _ = next(iter(by_seq.items()))
        lines.append(
            f"the ranks disagree on collective #{seq}" + (f" of group {group}" if group else "")
            + ": their collective sequences diverged"
        )  # fmt: skip
        return RecordFindings(tuple(lines), _minority(waiting), "different")
    lines.append("the ranks wait at different sequence ids: some rank skipped or added a collective")
    return RecordFindings(tuple(lines), _minority(by_seq), "behind")


def _agrees(state: RankState, op: RecordedOp | None) -> bool:
    if op is None:
        return state.kind not in WAITING
    return state.kind == "init" or (state.kind == "collective" and state.collective == op.op)


def agreement(states: Sequence[RankState], records: Sequence[RankRecord]) -> tuple[str, ...]:
    """One line saying whether the records agree with the stacks, and a line per rank that does not."""
    by_rank = {r.rank: r for r in records}
    agree: list[int] = []
    differ: list[str] = []
    for state in states:
        record = by_rank.get(state.rank) if state.rank is not None else None
        if record is None or state.kind in ("unknown", "exited"):
            continue
        op = record.waiting_in()
        if _agrees(state, op):
            agree.append(state.rank or 0)
        else:
            recorded = f"waits in {op.label()}" if op else "has nothing in flight"
            differ.append(
                f"rank {state.rank}: its stack is {state.describe()}, its Flight Recorder {recorded} "
                "(a dump older than the hang, or a collective issued from another thread)"
            )
    lines = [f"the Flight Recorder agrees with the stacks for {_ranks(agree)}"] if agree else []
    return (*lines, *differ)


def state_from_record(record: RankRecord, host: str = "") -> RankState:
    """A rank's state from its record alone (its stack could not be read)."""
    op = record.waiting_in()
    if op is None:
        done = record.last_done()
        detail = f"its last finished collective: {done.label()}" if done else "no collective recorded"
        return RankState(record.rank, 0, host, kind="outside", detail=detail)
    sample = RankSample(pid=0, host=host, rank=record.rank, frames=op.frames, contexts=record.contexts)
    state = classify(sample)
    if state.kind not in WAITING or state.collective != op.op:
        state = replace(state, kind="collective", collective=op.op, via="")
    return replace(state, detail=f"from its Flight Recorder: {op.label()}")
