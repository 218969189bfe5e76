"""Ranks in different collectives where the order of the calls is not the program's own: the
interpreter decides it.

- A collective in a finalizer (`__del__`, a `weakref.finalize` callback) runs wherever the
  object's last reference goes: on the ranks that made the object (D21 where it is made under a
  rank test), at a point of each rank's sequence the others do not share (D19). That rank is the
  odd one.
- A collective in an exit hook (`atexit.register`) runs once the rank's main code has ended. While
  the others are still in loops that run as many times on every rank, only an exception ended it
  (D20); in a loop over the data, that rank may have run out of it (D9).
- A collective inside a memoised function (`@functools.lru_cache`, `@cache`, `@cached_property`)
  runs only where the call misses the cache: ranks elsewhere got a hit (an argument they had seen
  before, or a first call made on their side alone) and went on past it. They are the odd ones
  (D19), unless a rank test sends some ranks there (mismatch.py reads that one, D21).
- A collective per element of a `set` (`for name in set(metrics) | set(REQUIRED)`): each process
  hashes strings with its own seed, so each rank walks the set in its own order and the ranks
  meet in different collectives. No rank is the odd one (D19).
"""

from __future__ import annotations

import re

from triage.core.hang.classify import RankState
from triage.core.hang.mismatch import Diagnosis, Group, describe_groups, ints, rank_branch
from triage.core.hang.paths import context, none_over_data
from triage.core.hang.stacks import Frame, LineContext, agree, rank_label

Reading = tuple[list[Diagnosis], tuple[int, ...], str]

# `for k in set(a) | set(b)`, `for k in {...}`, `for k in names.union(other)`, `for k in frozenset(x)`;
# not `sorted(set(...))`, which fixes the order.
_SET_LOOP = re.compile(
    r"^(?:async )?for .+? in (?!sorted\()(?:.*\b(?:set|frozenset)\(|\{[^:{}]*\}$|.*\.(?:union|intersection|"
    r"difference|symmetric_difference)\()"
)


def _hook(state: RankState, kind: str) -> tuple[Frame, LineContext] | None:
    return next(((f, c) for f, c in state.path if c is not None and c.exit_hook == kind), None)


def _loops(state: RankState) -> list[str]:
    """The headers of the loops around each user frame of `state`'s stack."""
    return [h for _, c in state.path if c is not None for _, _, h in c.blocks if not h.startswith("if ")]


def _finalized(groups: tuple[Group, ...]) -> Reading | None:
    found = [(g, _hook(g.state, "__del__")) for g in groups]
    hooked = [(g, h) for g, h in found if h]
    if not hooked or len(hooked) == len(groups):
        return None
    odd, (frame, ctx) = hooked[0]
    made = f", and its class is made only under `if {ctx.made_under}:`" if ctx.made_under else ""
    evidence = (
        f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside {frame.function}() "
        f"(line {frame.line}), a finalizer: it runs where the object's last reference goes, on the "
        f"ranks that hold one{made}, at a point of the sequence the other ranks do not share",
        describe_groups(groups),
    )
    verdict = f"{rank_label(odd.ranks)} issued a collective from a finalizer ({frame.function})"
    entries = ["D21", "D19"] if ctx.made_under else ["D19", "D21"]
    return [Diagnosis(e, evidence) for e in entries], ints(odd.ranks), verdict


def _outermost_hook(state: RankState) -> tuple[Frame, LineContext] | None:
    """The exit hook at the bottom of `state`'s user frames: called by the interpreter, not by the
    rank's code (a function both registered and called from `main` is not in its hook there)."""
    found = _hook(state, "atexit")
    return found if found and state.path and state.path[-1][0] == found[0] else None


def _at_exit(groups: tuple[Group, ...]) -> Reading | None:
    hooked = [(g, _outermost_hook(g.state)) for g in groups]
    ended = [(g, h) for g, h in hooked if h]
    busy = [g for g, h in hooked if not h]
    if not ended or not busy:
        return None
    odd, (frame, _) = ended[0]
    loops = [h for g in busy for h in _loops(g.state)]
    only_raised = none_over_data(loops)
    evidence = (
        f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside {frame.function}() (line "
        f"{frame.line}), an exit hook (`atexit`): its main code has ended while "
        f"{rank_label(others := tuple(r for g in busy for r in g.ranks))} "
        f"{agree(others, 'still runs its own', 'still run theirs')} ("
        + ("loops that run as many times on every rank: an exception ended it, its traceback printed"
           if only_raised else "a loop over the data: it ran out of it first, or raised")
        + "), and the hook's collective keeps the process alive, so no launcher sees it end",
        describe_groups(groups),
    )  # fmt: skip
    verdict = f"{rank_label(odd.ranks)} ended its main code (most likely it raised) and waits in an exit hook"
    entries = ["D20", "D19"] if only_raised else ["D9", "D20"]
    return [Diagnosis(e, evidence) for e in entries], ints(odd.ranks), verdict


def _set_order(groups: tuple[Group, ...]) -> Reading | None:
    """Every group waits inside the same loop of the same function, one over a set."""
    ctxs = [context(g.state) for g in groups]
    files = {g.state.user_frame.file if g.state.user_frame else "" for g in groups}
    first = ctxs[0]
    if (
        len(files) != 1
        or first.loop is None
        or any(c.function != first.function or c.loop != first.loop for c in ctxs)
    ):
        return None
    header = next((h for a, b, h in first.blocks if (a, b) == first.loop), "")
    if not _SET_LOOP.match(header):
        return None
    evidence = (
        f"every rank waits inside `{header}` (line {first.loop[0]}), one collective per element of a "
        "set: each process hashes strings with a seed of its own (PYTHONHASHSEED), so each rank "
        "walks the set in its own order and the ranks meet in different collectives; iterate "
        "over `sorted(...)` instead",
        describe_groups(groups),
    )
    verdict = f"the ranks issue their collectives in each one's own order (a loop over a set, `{header}`)"
    return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], (), verdict


def _cache_hit(groups: tuple[Group, ...]) -> Reading | None:
    found = [
        (g, next(((f, c) for f, c in g.state.path if c is not None and c.memoised), None)) for g in groups
    ]
    missed = [(g, m) for g, m in found if m]
    hit = tuple(r for g, m in found if not m for r in g.ranks)
    if not missed or not hit or rank_branch(groups) is not None:
        return None
    odd, (frame, ctx) = missed[0]
    evidence = (
        f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside {frame.function}() (line "
        f"{frame.line}), memoised by `{ctx.memoised}`: its collective runs only where a call misses "
        f"the cache, and {rank_label(hit)} got a hit (an argument seen before on that rank, or a "
        "first call made there alone) and went on past it",
        describe_groups(groups),
    )
    verdict = f"{rank_label(hit)} skipped a collective inside a cached function (a cache hit)"
    return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], ints(hit), verdict


def interpreter_order(groups: tuple[Group, ...]) -> Reading | None:
    """The reading of `groups` (in different collectives) where the interpreter ordered the calls
    (or a cache decided whether they happen)."""
    return _finalized(groups) or _at_exit(groups) or _cache_hit(groups) or _set_order(groups)
