"""Ranks in different collectives where an exception, or a setting each rank read for itself, put
them on different paths.

- A rank inside an `except` clause the others did not enter, where the exception it caught is a
  check for values gone NaN or inf (an `if not torch.isfinite(loss): raise ...` in the function
  the others are in below that `try`, or `except FloatingPointError`): its values went
  non-finite and it took the recovery path on its own (D20, D19 second). That rank is the odd one.
- A rank waiting earlier in a loop whose later `try` (swallowing) or `with contextlib.suppress(...)`
  holds the others' collective: it raised inside that block, the error was swallowed, and it went
  round to the next iteration one collective short (D19, D20 second). That rank is the odd one.
- The same, the swallowing `try` in a function called further down that loop (a callback runner
  that logs a callback's error and goes on: `for cb in callbacks: try: cb.on_epoch_end() except
  Exception: log`): the rank waiting earlier in the loop raised in that `try` before the
  collective the others wait in under it, and went round (D19, D20 second).
- A custom autograd Function applied only under an `if` (`k = GatherKeys.apply(k)` for long
  batches) runs its `backward`, collective and all, only on the ranks whose forward applied it
  (D21, D19 second). Those ranks are the odd ones.
- A collective under a periodic test whose period is read from a settings object (`step %
  cfg["val_every"] == 0`, `args.eval_every`; not a literal or a constant), or bound in the function
  from values of the rank's own (`eval_every = EVAL_TOKENS // tokens.numel()`: periods.py),
  that some ranks took and the others passed at the same point of the same loop (not a rank that
  has left that loop: that one ran out of its data or stopped): the
  ranks' periods differ, each read from its own configuration (D19, D21 second).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.core.hang.classify import RankState
from triage.core.hang.mismatch import Diagnosis, Group, describe_groups, fewer, ints, rank_branch
from triage.core.hang.paths import (
    NON_FINITE,
    Parted,
    branch_only,
    conditional_only,
    in_handler,
    left_early,
    parting,
    past_loop,
    retry_shaped,
)
from triage.core.hang.stacks import agree, rank_label

Reading = tuple[list[Diagnosis], tuple[int, ...], str]

# `step % cfg["val_every"] == 0`: the period, where it is read from a settings object (a key or an
# attribute: `cfg["val_every"]`, `args.eval_every`), not a literal, a constant or a bare name.
_PERIOD = re.compile(r"%\s*(?P<period>[^%=!<>]+?)\s*[!=]=\s*0\b")
_CONSTANT = re.compile(r"^(?:\d+|[A-Z][A-Z0-9_]*|[A-Za-z_]\w*)$")
_NON_FINITE_ERRORS = re.compile(r"FloatingPointError|NaN|NonFinite|Overflow", re.IGNORECASE)


def _non_finite_raise(state: RankState) -> tuple[int, str] | None:
    """An `if <non-finite test>: raise` before a line of `state`'s path, as (line, test)."""
    return next(
        (
            (line, test)
            for _, c in state.path
            if c is not None
            for line, test in c.raises
            if NON_FINITE.search(test)
        ),
        None,
    )


def _recovered(groups: tuple[Group, ...]) -> Reading | None:
    for odd in groups:
        others = [g for g in groups if g is not odd]
        clauses = [in_handler(odd.state, g.state) for g in others]
        if not others or not all(clauses):
            continue
        line, clause = clauses[0] or (0, "")
        raised = next((r for g in others if (r := _non_finite_raise(g.state))), None)
        if raised is None and not _NON_FINITE_ERRORS.search(clause):
            continue
        why = (
            f"`if {raised[1]}: raise` (line {raised[0]}) on the others' path is a check for values "
            "gone NaN or inf"
            if raised
            else f"`{clause}` catches the error raised for values gone NaN or inf"
        )
        evidence = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside `{clause}:` (line {line}), "
            f"which the other ranks did not enter: {why}; its values went non-finite, it raised, and "
            "its recovery path (reload, resynchronise, restart) issues collectives the others, whose "
            "values stayed finite, are not in",
            describe_groups(groups),
        )
        verdict = f"{rank_label(odd.ranks)} went NaN or inf and took a recovery path on its own"
        return [Diagnosis("D20", evidence), Diagnosis("D19", evidence)], ints(odd.ranks), verdict
    return None


def _parted_pairs(groups: tuple[Group, ...]) -> Iterator[tuple[Group, Group, Parted]]:
    """Every ordered pair of groups whose stacks part inside one function, with where they part."""
    for ahead in groups:
        for waiting in groups:
            parted = parting(ahead.state, waiting.state) if ahead is not waiting else None
            if parted is not None:
                yield ahead, waiting, parted


def _went_round(groups: tuple[Group, ...]) -> Reading | None:
    for ahead, waiting, parted in _parted_pairs(groups):
        a_line, a_ctx, w_line, w_ctx, _ = parted
        block = w_ctx.suppressed or (w_ctx.swallowed and (w_ctx.swallowed[0], w_ctx.swallowed[2]))
        loop = w_ctx.loop
        if not block or loop is None or a_ctx.loop != loop or not loop[0] < a_line < block[0] <= w_line:
            continue
        kind = "`with suppress(...)`" if w_ctx.suppressed else "`try` whose `except` swallows"
        evidence = (
            f"{rank_label(ahead.ranks)} {agree(ahead.ranks, 'waits', 'wait')} in {ahead.state.collective}() at line {a_line}, earlier in "
            f"the loop (line {loop[0]}) than the {kind} at line {block[0]} where "
            f"{rank_label(waiting.ranks)} {agree(waiting.ranks, 'waits', 'wait')} in "
            f"{waiting.state.collective}(): it raised inside that block, the error was swallowed "
            "unseen, and it went round to the next iteration without the collective",
            describe_groups(groups),
        )
        verdict = f"{rank_label(ahead.ranks)} skipped a collective through a swallowed exception"
        return [Diagnosis("D19", evidence), Diagnosis("D20", evidence)], fewer(ahead, groups), verdict
    return None


def _went_round_below(groups: tuple[Group, ...]) -> Reading | None:
    for ahead, waiting, parted in _parted_pairs(groups):
        a_line, _, w_line, w_ctx, depth = parted
        loop = w_ctx.loop
        if loop is None or not loop[0] < a_line < w_line <= loop[1]:
            continue
        for frame, ctx in list(reversed(waiting.state.path))[depth + 1 :]:
            if ctx is None or ctx.swallowed is None or not ctx.swallowed[0] < frame.line < ctx.swallowed[1]:
                continue
            if retry_shaped(ctx):
                break  # an attempt run again on one rank: mismatch.py's retry loop
            start, handler, _ = ctx.swallowed
            evidence = (
                f"{rank_label(ahead.ranks)} {agree(ahead.ranks, 'waits', 'wait')} in {ahead.state.collective}() at line "
                f"{a_line}, earlier in the loop (line {loop[0]}) than the call at line {w_line} under which "
                f"{rank_label(waiting.ranks)} {agree(waiting.ranks, 'waits', 'wait')} in {waiting.state.collective}(), "
                f"reached through the `try` at line {start} of `{frame.function}` whose `except` (line "
                f"{handler}) swallows the error and goes on: {rank_label(ahead.ranks)} raised in that "
                "`try` before the collective, its error logged or swallowed, and went round to the "
                "next iteration without it",
                describe_groups(groups),
            )
            verdict = f"{rank_label(ahead.ranks)} skipped a collective through an error swallowed in `{frame.function}`"
            return [Diagnosis("D19", evidence), Diagnosis("D20", evidence)], fewer(ahead, groups), verdict
    return None


def _applied_only(groups: tuple[Group, ...]) -> Reading | None:
    for odd in groups:
        frame_ctx = next(
            (
                (f, c)
                for f, c in odd.state.path
                if c is not None and c.made_if and f.function.split(".")[-1] == "backward"
            ),
            None,
        )
        if frame_ctx is None:
            continue
        frame, ctx = frame_ctx
        others = [g for g in groups if g is not odd]
        if any((f.file, f.function) == (frame.file, frame.function) for g in others for f, _ in g.state.path):
            continue
        evidence = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside backward() (line "
            f"{frame.line}) of an autograd Function the source applies only under `if {ctx.made_if}:`: "
            "its backward runs only where the forward took that branch, and the other ranks' "
            "backward issued no such collective",
            describe_groups(groups),
        )
        verdict = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective of an autograd Function's backward that only "
            f"some ranks applied (`if {ctx.made_if}:`)"
        )
        return [Diagnosis("D21", evidence), Diagnosis("D19", evidence)], fewer(odd, groups), verdict
    return None


def _own_period(groups: tuple[Group, ...]) -> Reading | None:
    for odd in groups:
        for other in groups:
            # A rank out of the loop that holds the test did not pass it: it left that loop.
            if odd is other or past_loop(other.state, odd.state) or left_early(other.state, odd.state):
                continue
            found = branch_only(odd.state, other.state) or conditional_only(odd.state, other.state)
            period = _PERIOD.search(found[1]) if found else None
            if not found or not period:
                continue
            derived = any(found[0] in c.derived_periods for _, c in odd.state.path if c is not None)
            if _CONSTANT.match(period.group("period").strip()) and not derived:
                continue
            evidence = (
                f"{rank_label(odd.ranks)} {'waits' if len(odd.ranks) == 1 else 'wait'} in "
                f"{odd.state.collective}() reached through `{found[1]}` (line {found[0]}), which "
                f"{rank_label(other.ranks)} passed at the same point of the loop: a periodic test "
                f"every rank would pass together unless its period (`{period.group('period').strip()}`) "
                + (
                    "differs across ranks, each worked out from values of the rank's own"
                    if derived
                    else "differs across ranks, each read from its own configuration"
                ),
                describe_groups(groups),
            )
            verdict = f"the ranks disagree on the period of `{found[1]}` (a per-rank setting)"
            if any(found[0] in c.length_periods for _, c in odd.state.path if c is not None):
                # A period taken from the length of each rank's own loader or shard: those lengths differ.
                evidence = (
                    evidence[0] + "; the period takes the length of the rank's own data",
                    *evidence[1:],
                )
                return [Diagnosis("D22", evidence), Diagnosis("D19", evidence)], fewer(odd, groups), verdict
            return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], fewer(odd, groups), verdict
    return None


def errors_apart(groups: tuple[Group, ...]) -> Reading | None:
    """The reading of `groups` (in different collectives) where an exception, an autograd Function
    applied under an `if`, or a per-rank period parted the ranks; None where a rank test around a
    collective says more (mismatch.py reads that one)."""
    if rank_branch(groups) is not None:
        return None
    return (
        _recovered(groups)
        or _went_round(groups)
        or _went_round_below(groups)
        or _applied_only(groups)
        or _own_period(groups)
    )
