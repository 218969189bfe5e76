"""A lock held across a collective, taken in a different order on each rank.

Two threads of a rank share a lock, and each holds it across a collective of its own (the training
step's all_reduce, a snapshot thread's gather on a group of its own). On one rank the first thread
wins the lock, on another the second: each rank has one thread in a collective whose partners on
the other rank wait for the lock. Every rank is part of the cycle, so no rank is the odd one (D19;
each rank's waiting thread alone reads as a straggler, MN3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from triage.core.hang.classify import in_distributed, is_library, user_frame
from triage.core.hang.mismatch import Diagnosis
from triage.core.hang.stacks import Frame, RankSample, ThreadStack, rank_label

if TYPE_CHECKING:
    from triage.core.hang.analyse import HangPicture

# `with state_lock:`, `with self._mutex:`, `lock.acquire()`, `with cond:` over a threading.Condition.
_LOCKED = re.compile(r"^with\b.*\b\w*(?:lock|mutex|cond|semaphore)\w*\b.*:|\.acquire\(", re.IGNORECASE)


def read_threads(threads: Sequence[ThreadStack]) -> tuple[ThreadStack, ...]:
    """The threads of a rank (besides its main thread) the analysis reads: those in a collective,
    and those blocked on a line of the user's own code (a lock taken there: `with state_lock:`),
    which may hold up a collective of another thread."""
    return tuple(
        t
        for t in threads
        if in_distributed(t.frames) or (not t.active and t.frames and not is_library(t.frames[0].file))
    )


def _stacks(sample: RankSample) -> list[tuple[Frame, ...]]:
    return [sample.frames, *(t.frames for t in sample.threads)]


def _split(sample: RankSample) -> tuple[Frame | None, Frame | None]:
    """The user frame of a thread of `sample` in a collective, and of one waiting on a lock."""
    held = waits = None
    for frames in _stacks(sample):
        frame = user_frame(frames)
        if frame is None:
            continue
        code = sample.contexts[frame.where()].code if frame.where() in sample.contexts else ""
        if in_distributed(frames):
            held = held or frame
        elif _LOCKED.search(code):
            waits = waits or frame
    return held, waits


def lock_cycle(picture: HangPicture, samples: Sequence[RankSample]) -> HangPicture:
    """`picture` read as a lock-order deadlock where every rank seen has a thread in a collective
    and another waiting on a lock, and the ranks' collectives are not the same call."""
    ranked = [s for s in samples if s.rank is not None and not s.error]
    split = {s.rank: _split(s) for s in ranked}
    if len(split) < 2 or not all(held and waits for held, waits in split.values()):
        return picture
    if len({held.where() for held, _ in split.values() if held}) < 2:
        return picture
    lines = tuple(
        f"rank {rank}: a thread waits in a collective at {held.where()} while another waits for a lock "
        f"at {waits.where()}"
        for rank, (held, waits) in sorted(split.items(), key=lambda kv: kv[0] or 0)
        if held and waits
    )
    evidence = (
        *lines,
        f"{rank_label(tuple(split))} each hold a lock across a different collective: the thread that "
        "won the lock differs by rank, and each collective's partner on the other ranks is the "
        "thread waiting for that lock (take the lock outside the collectives, or the same order everywhere)",
    )
    return replace(
        picture,
        suspect_ranks=(),
        verdict="a lock held across collectives, won by a different thread on each rank: the ranks' threads wait for each other in a cycle",
        diagnoses=(
            Diagnosis("D19", evidence),
            Diagnosis("MN3", evidence),
            *(d for d in picture.diagnoses if d.entry not in ("D19", "MN3")),
        ),
    )
