"""How one rank left the path the others are on, read from the source around their lines: it
left the loop the others are still in (ran out of batches), a `continue` / `break` / `return`
jumped over the collective the others wait in, an exception raised before it was swallowed by
an `except` that does not raise again, a function it returned from early, a retry loop that
issued the collective again, or an `except` clause only it entered."""

from __future__ import annotations

import re
from collections.abc import Iterable

from triage.core.hang.classify import RankState
from triage.core.hang.counted_outer import counted_around_data
from triage.core.hang.grad_skips import unused_gradient
from triage.core.hang.source_context import RANK_TEST
from triage.core.hang.stacks import Frame, LineContext

# A test on a random draw (`random.random() < p`, `np.random.rand()`, `torch.rand(1)`): each rank's
# generator gives its own value, so a collective behind it is a desync of the ranks' streams.
RANDOM_DRAW = re.compile(
    r"\brandom\.\w+\(|\bnp\.random\.|\btorch\.(rand|randn|randint|bernoulli|multinomial)\("
)


def context(state: RankState) -> LineContext:
    """The source context of `state`'s line (empty where it has none)."""
    return state.context or LineContext()


# A loop over the data (batches, a loader, shards, steps, epochs): running out of it first is D9.
# A loop over anything else (a dict of metrics, a list of parameters) run a different number of
# times is a different number of collectives, a desync.
_DATA_LOOP = re.compile(
    r"load|batch|data|\bdl\b|_dl\b|sampler|shard|epoch|step|iter|sample|record|example|token|split",
    re.IGNORECASE,
)


# `for i in range(rank, len(xs), world)`: a hand-strided shard of the data, whatever its names.
_STRIDED = re.compile(r"^for .+ in range\((?P<start>[^,]+),[^,]+,[^,]+\)$")


def data_header(header: str) -> bool:
    """Whether a loop's header (`for batch in loader`) runs over the data."""
    strided = _STRIDED.match(header)
    return bool(_DATA_LOOP.search(header) or (strided and RANK_TEST.search(strided.group("start"))))


def _over_data(ctx: LineContext, loop: tuple[int, int]) -> bool:
    header = next((b[2] for b in ctx.blocks if (b[0], b[1]) == loop), "")
    return not header or data_header(header) or loop[0] in ctx.exhausting


def _trains(state: RankState) -> bool:
    """`state` waits in the gradient sync of a training step (DDP's in backward(), FSDP's)."""
    return "backward" in state.via or "FSDP" in state.via


# A loop that counts (`for _ in range(max_steps)`, its bound not taken from the data) runs as many
# times on every rank: a rank out of it early took one of its jumps, a decision of its own (early
# stopping on a rank-local metric), not an end of data.
_COUNTED = re.compile(r"^for .+ in range\((?P<bound>.*)\)$")
# A loop that can run the same attempt again: a `while` or a count of tries.
_ATTEMPTS = re.compile(r"^(while\b|for .+ in (range|itertools\.count|count)\()")
_FROM_DATA = re.compile(r"len\(|load|batch|data|\bdl\b|sampler|shard|sample|record|example|token", re.I)


def counted(header: str) -> bool:
    """Whether a loop's header counts to a bound every rank shares (`for _ in range(steps)`)."""
    found = _COUNTED.match(header)
    return found is not None and not _FROM_DATA.search(found.group("bound"))


def none_over_data(headers: Iterable[str]) -> bool:
    """Whether none of these loop headers walks the data: each counts to a bound every rank
    shares (`range(steps)`) or is no data loop at all, so a rank leaving one made its own choice."""
    return all(counted(h) or not data_header(h) for h in headers)


def busy_loops(early: RankState, busy: RankState) -> list[tuple[int, int, str, LineContext]]:
    """The loops `busy` is still in and `early` is out of, as (first line, last line, header, the
    context of busy's line in that loop's function)."""
    e, b = context(early), context(busy)
    found: list[tuple[int, int, str, LineContext]] = []
    ef, bf = early.user_frame, busy.user_frame
    same_function = bool(ef and bf and ef.file == bf.file) and e.function == b.function
    if same_function and b.loop is not None and e.loop != b.loop:
        found += [(*blk, b) for blk in b.blocks if blk[:2] == b.loop]
    parted = parting(early, busy)
    if parted is not None:
        e_line, _, _, b_ctx, depth = parted
        found += [(*blk, b_ctx) for blk in _own_blocks(b_ctx, e_line) if not blk[2].startswith("if ")]
        for _, c in _outermost_first(busy)[depth + 1 :]:
            found += [(*blk, c) for blk in c.blocks if blk[:2] == c.loop]
    return found


# A `while` loop whose test reads no data (`while not converged`, `while patience > 0`): a rank
# out of it left when its own test turned false, on its own values. `while True` says nothing:
# its `break`s may be the end of the data.
_WHILE = re.compile(r"^while (?P<test>.+)$")


def _own_test(header: str) -> bool:
    found = _WHILE.match(header)
    if found is None or found.group("test").strip() in ("True", "1"):
        return False
    return not _FROM_DATA.search(found.group("test"))


def left_by_jump(early: RankState, busy: RankState) -> tuple[int, str, str] | None:
    """A counting loop `busy` is still in, that `early` left through one of its `break`s or
    `return`s, or a `while` loop on a test of the ranks' own values that `early` left when its
    test turned false: (the jump's or the test's line, its kind, the loop's header), or None."""
    loops = busy_loops(early, busy)
    for first, last, header, ctx in loops:
        if _own_test(header) and ctx.loop == (first, last):
            return first, "test", header
        if (counted(header) or first in ctx.endless) and ctx.loop == (first, last):
            jump = next(((line, kind) for line, kind in ctx.jumps if kind in ("break", "return")), None)
            if jump:
                return (*jump, header)
    # An outer counting loop left through a jump only some ranks take (`if rank == 0: break`)
    # while the others are still in a loop inside it.
    for first, _, header, ctx in loops:
        if counted(header) or first in ctx.endless:
            ranked = next(((line, kind) for loop, line, kind in ctx.rank_jumps if loop == first), None)
            if ranked:
                return (*ranked, header)
    return None


# A test for a loss or gradient gone NaN / inf (`if not torch.isfinite(loss)`, `if math.isnan(x)`).
NON_FINITE = re.compile(r"isfinite|isnan|isinf|\bnan\b|\binf\b|overflow", re.IGNORECASE)


def skipped_iteration(early: RankState, busy: RankState) -> tuple[int, str, str, bool, str] | None:
    """A guarded `continue` in a loop `busy` is still in and `early` is out of, that made `early`
    skip that iteration's collectives and run ahead: in a counting loop (as many iterations on
    every rank) any such `continue`; in a loop over the data only one testing for a value gone
    NaN or inf (running out of data reads the same otherwise). Or, in the function `busy` called
    from that loop, an `if <non-finite test>: return` before its collective ("skip the bad
    batch"). As (its line, its test, the loop's header, whether the test is for a non-finite
    value, the jump: `continue` or `return`)."""
    loops = busy_loops(early, busy)
    for first, last, header, ctx in loops:
        if ctx.loop != (first, last):
            continue
        for line, test in ctx.skips:
            non_finite = bool(NON_FINITE.search(test))
            if non_finite or counted(header):
                return line, test, header, non_finite, "continue"
    parted = parting(early, busy)
    inner = next((h for first, last, h, ctx in loops if ctx.loop == (first, last)), "")
    for _, ctx in _outermost_first(busy)[parted[4] + 1 :] if parted and inner else ():
        found = next(((line, test) for line, test in ctx.returns if NON_FINITE.search(test)), None)
        if found:
            return *found, inner, True, "return"
    return None


def raised_through(early: RankState, busy: RankState) -> tuple[int, int, bool] | None:
    """`early` waits in the `finally` of a `try` whose body `busy` is still in (where the two
    paths part): it left that body before the others, by an exception the `finally` holds back
    until its collective returns, or by running out of data. As (the `try` line, the `finally`
    line, whether no loop `busy` is in runs over the data: then only the exception is left)."""
    parted = parting(early, busy)
    if parted is None:
        return None
    e_line, e_ctx, b_line, _, _ = parted
    final = e_ctx.final
    if final is None or not final[0] < b_line <= final[2] or e_line < final[1]:
        return None
    loops = busy_loops(early, busy)
    return final[0], final[1], none_over_data(h for _, _, h, _ in loops)


def past_loop(early: RankState, busy: RankState) -> bool:
    """`early` waits after the end of the loop over the data that `busy` is still inside (same
    function)."""
    e, b = context(early), context(busy)
    if not (early.user_frame and busy.user_frame) or early.user_frame.file != busy.user_frame.file:
        return False
    if e.function != b.function or b.loop is None or e.loop == b.loop:
        return False
    return early.user_frame.line > b.loop[1] and (_trains(busy) or _over_data(b, b.loop))


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
    second entry), or None: a jump over it, an exception swallowed around it, or a test of a
    gradient for None around it (grad_skips)."""
    jump = _skipped(ahead, waiting)
    if jump:
        return f"a `{jump[1]}` at line {jump[0]} jumps over it", "", "D21"
    caught = _caught(ahead, waiting)
    if caught:
        how = f"it raised in the `try` at line {caught[0]} and the `except` at line {caught[1]} swallowed it"
        return how, " (an exception it caught)", "D20"
    return unused_gradient(ahead, waiting)


def _outermost_first(state: RankState) -> list[tuple[Frame, LineContext]]:
    return [(f, c or LineContext()) for f, c in reversed(state.path)]


Parted = tuple[int, LineContext, int, LineContext, int]  # parting()'s answer


def parting(a: RankState, b: RankState) -> Parted | None:
    """Where two ranks' paths part: the deepest user function both stacks run, at different lines,
    as (a's line, its context, b's line, its context, the index of that frame outermost first)."""
    pa, pb = _outermost_first(a), _outermost_first(b)
    for i, ((fa, ca), (fb, cb)) in enumerate(zip(pa, pb, strict=False)):
        if (fa.file, fa.function) != (fb.file, fb.function):
            return None
        if fa.line != fb.line:
            return fa.line, ca, fb.line, cb, i
    return None


def _own_blocks(mine: LineContext, other_line: int) -> list[tuple[int, int, str]]:
    """The `if`s and loops around a line that do not hold the other rank's line as well."""
    return [b for b in mine.blocks if not b[0] <= other_line <= b[1]]


def left_early(early: RankState, busy: RankState) -> bool:
    """`early` waits further down the function where both paths part, on a line no `if` or loop
    of its own leads to, while `busy` is still in a loop below that point (in the function it
    called there, or one of its own around its line): `early` got out of that loop first, by
    running out of data or by a `return` / `break` (the loop of the same function is past_loop's)."""
    parted = parting(early, busy)
    if parted is None:
        return False
    e_line, e_ctx, b_line, b_ctx, depth = parted
    if e_line <= b_line or _own_blocks(e_ctx, b_line):
        return False
    deeper = _outermost_first(busy)[depth + 1 :]
    loops = [(b_ctx, b[:2]) for b in _own_blocks(b_ctx, e_line) if not b[2].startswith("if ")]
    loops += [(c, c.loop) for _, c in deeper if c.loop is not None]
    return any(_trains(busy) or _over_data(c, loop) for c, loop in loops)


def branch_only(a: RankState, b: RankState) -> tuple[int, str] | None:
    """The `if` or loop through which `a` reached its collective, which `b`'s path (parting from
    a's in the same function) does not enter, where `b` has none of its own: a collective under
    control flow that differs across ranks (a test on local data, a loop over a list that is
    empty on some ranks). As (its line, its header)."""
    parted = parting(a, b)
    if parted is None:
        return None
    a_line, a_ctx, b_line, b_ctx, _ = parted
    mine, theirs = _own_blocks(a_ctx, b_line), _own_blocks(b_ctx, a_line)
    return (mine[-1][0], mine[-1][2]) if mine and not theirs else None


def retry_shaped(ctx: LineContext) -> bool:
    """Whether the swallowing `try` around a line sits in a loop that can run the same attempt
    again (a `while`, a count of tries), not in one over items that runs each once."""
    if ctx.swallowed is None or ctx.loop is None or not ctx.loop[0] < ctx.swallowed[0] <= ctx.loop[1]:
        return False
    return bool(_ATTEMPTS.match(next((b[2] for b in ctx.blocks if (b[0], b[1]) == ctx.loop), "")))


def retried(odd: RankState, other: RankState) -> tuple[int, int, str] | None:
    """A retry loop on `odd`'s path that `other`'s does not run: a user frame (not on `other`'s
    stack at that line) inside a `try` within a loop, whose `except` swallows the error and lets
    the loop go round again. An attempt that raised after its collective issues that collective
    once more on `odd` only. As (the `try` line, the handler's line, the loop's header)."""
    theirs = {(f.file, f.function, f.line) for f, _ in other.path}
    for frame, ctx in odd.path:
        if ctx is None or ctx.swallowed is None or ctx.loop is None:
            continue
        if (frame.file, frame.function, frame.line) in theirs:
            continue
        start, handler, end = ctx.swallowed
        first, last = ctx.loop
        if not first < start <= last or any(handler <= line <= end for line, _ in ctx.jumps):
            continue
        if not retry_shaped(ctx):
            continue  # a loop over items (`for cb in callbacks`) runs each once: no attempt again
        header = next((b[2] for b in ctx.blocks if (b[0], b[1]) == ctx.loop), "")
        return start, handler, header
    return None


def returned_early(early: RankState, busy: RankState) -> tuple[int, str, str] | None:
    """`early` waits further down the function where both paths part, past the call in which
    `busy` waits, and that called function has an `if <test>: ... return` before `busy`'s line:
    `early` took that return (nothing to do on its data) and skipped the collective. As (the `if`
    line, its test, the called function)."""
    parted = parting(early, busy)
    if parted is None:
        return None
    e_line, e_ctx, b_line, _, depth = parted
    deeper = _outermost_first(busy)[depth + 1 : depth + 2]
    if e_line <= b_line or _own_blocks(e_ctx, b_line) or not deeper:
        return None
    called, ctx = deeper[0]
    return (*ctx.returns[0], called.function) if ctx.returns else None


def in_handler(odd: RankState, other: RankState) -> tuple[int, str] | None:
    """An `except` clause on `odd`'s path that `other`'s does not run (a frame not on `other`'s
    stack at that line): `odd` reached its collective because it raised, which `other` did not.
    As (the clause's line, its header)."""
    theirs = {(f.file, f.function, f.line) for f, _ in other.path}
    return next(
        (
            ctx.handler
            for frame, ctx in odd.path
            if ctx is not None and ctx.handler and (frame.file, frame.function, frame.line) not in theirs
        ),
        None,
    )


def unwound(early: RankState, busy: RankState) -> tuple[int, bool, bool] | None:
    """`early` waits in the `__exit__` of a context manager (called from the `with` line where
    the two paths part) whose body `busy` is still in: it left that body first, by an exception
    the manager holds back until its collective returns, by a jump, or by running out of data.
    As (the `with` line, whether an exception is all that is left: no `return` / `break` /
    `continue` in the body and no loop over the data `busy` is in there, whether that exception
    is swallowed: by the manager, or by an `except` around the `with` that goes on)."""
    parted = parting(early, busy)
    if parted is None:
        return None
    e_line, e_ctx, b_line, _, depth = parted
    managed = e_ctx.managed
    if managed is None or e_line != managed[0] or not managed[1] <= b_line <= managed[2]:
        return None
    inner = _outermost_first(early)[depth + 1 : depth + 2]
    # A class's `__exit__`, or a @contextmanager generator past its `yield` (in its `finally`).
    if not inner or not (inner[0][0].function.endswith("exit__") or inner[0][1].final is not None):
        return None
    loops = busy_loops(early, busy)
    out_of_data = not none_over_data(h for _, _, h, _ in loops)
    if out_of_data and counted_around_data(_outermost_first(busy)[depth + 1 :], data_header):
        out_of_data = False  # out of data, it would have gone round the counted loop again
    only_raised = not e_ctx.managed_jumps and not out_of_data
    return managed[0], only_raised, inner[0][1].suppresses or e_ctx.swallowed is not None


def signalled(state: RankState) -> tuple[Frame, str] | None:
    """The frame of `state`'s path that runs a signal handler, with the signal's name."""
    return next(((f, c.signal_handler) for f, c in state.path if c is not None and c.signal_handler), None)


def conditional_only(a: RankState, b: RankState) -> tuple[int, str, bool] | None:
    """An `if` on `a`'s path past where it parts from `b`'s (around a's line there, or in a
    function a called from it), where `b`'s path past that point goes through loops at most: a's
    collective is the conditional one, issued on the ranks whose test held. As (the `if` line,
    its header, whether its test reads a running count the rank keeps itself)."""
    parted = parting(a, b)
    if parted is None:
        return None
    a_line, a_ctx, b_line, b_ctx, depth = parted

    def ifs(
        ctx: LineContext, other_line: int, deeper: list[tuple[Frame, LineContext]]
    ) -> list[tuple[tuple[int, int, str], LineContext]]:
        found = [(blk, ctx) for blk in _own_blocks(ctx, other_line) if blk[2].startswith("if ")]
        for _, c in deeper:
            found += [(blk, c) for blk in c.blocks if blk[2].startswith("if ")]
        return found

    mine = ifs(a_ctx, b_line, _outermost_first(a)[depth + 1 :])
    if not mine or ifs(b_ctx, a_line, _outermost_first(b)[depth + 1 :]):
        return None
    (line, _, header), ctx = mine[-1]
    return line, header, line in ctx.drifting


def recursive(state: RankState, function: str) -> bool:
    """Whether `function` runs more than once on `state`'s path (it calls itself)."""
    return sum(1 for f, _ in state.path if f.function == function) > 1
