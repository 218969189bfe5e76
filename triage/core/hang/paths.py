"""How one rank left the path the others are on, read from the source around their lines: it
left the loop the others are still in (ran out of batches), a `continue` / `break` / `return`
jumped over the collective the others wait in, or an exception raised before it was swallowed by
an `except` that does not raise again."""

from __future__ import annotations

from triage.core.hang.classify import RankState
from triage.core.hang.stacks import LineContext


def context(state: RankState) -> LineContext:
    """The source context of `state`'s line (empty where it has none)."""
    return state.context or LineContext()


def past_loop(early: RankState, busy: RankState) -> bool:
    """`early` waits after the end of the loop that `busy` is still inside (same function)."""
    e, b = context(early), context(busy)
    if not (early.user_frame and busy.user_frame) or early.user_frame.file != busy.user_frame.file:
        return False
    if e.function != b.function or b.loop is None or e.loop == b.loop:
        return False
    return early.user_frame.line > b.loop[1]


def _skipped(ahead: RankState, waiting: RankState) -> tuple[int, str] | None:
    """A jump between `ahead`'s line and `waiting`'s later line in the same loop, if any."""
    a, w = context(ahead), context(waiting)
    if not (ahead.user_frame and waiting.user_frame) or a.loop is None or a.loop != w.loop:
        return None
    low, high = ahead.user_frame.line, waiting.user_frame.line
    if low >= high:
        return None
    return next(((line, kind) for line, kind in a.jumps if low < line < high), None)


def _caught(past: RankState, waiting: RankState) -> tuple[int, int] | None:
    """(try line, handler line) of a `try` around `waiting`'s line whose handler swallows an
    exception, where `past` waits after that statement in the same function: `past` raised inside
    the body and skipped the collective `waiting` is in."""
    p, w = context(past), context(waiting)
    if not (past.user_frame and waiting.user_frame) or w.swallowed is None:
        return None
    if past.user_frame.file != waiting.user_frame.file or p.function != w.function:
        return None
    start, handler, end = w.swallowed
    return (start, handler) if past.user_frame.line > end else None


def how_skipped(ahead: RankState, waiting: RankState) -> tuple[str, str, str] | None:
    """How `ahead` skipped the collective `waiting` is in, as (how, why for the verdict, the
    second entry), or None: a jump over it, or an exception swallowed around it."""
    jump = _skipped(ahead, waiting)
    if jump:
        return f"a `{jump[1]}` at line {jump[0]} jumps over it", "", "D21"
    caught = _caught(ahead, waiting)
    if caught:
        how = f"it raised in the `try` at line {caught[0]} and the `except` at line {caught[1]} swallowed it"
        return how, " (an exception it caught)", "D20"
    return None
