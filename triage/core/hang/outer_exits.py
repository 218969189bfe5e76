"""Two ways the ranks' paths part that the loop and branch readings miss.

A rank waiting past a loop the others are still in (in a loop nested inside it, over parameters
or buckets, not the data) left that outer loop through one of its guarded `break`s / `return`s:
a `while True` or a counting loop ends only there, on a test of the rank's own values (its own
clock, its own metric), a decision the others did not take (D19).

A rank whose collective sits in a function that library code called back from a line (a
`logging.Filter`'s `filter` under `log.info(...)`, a hook a framework runs) while the others are
past that line: the library decided, per rank, whether to call it (a log level, a handler, an
option set on some ranks), so the collective runs only where it did (D21).
"""

from __future__ import annotations

import re

from triage.core.hang.classify import RankState
from triage.core.hang.paths import Parted, counted, data_header, parting
from triage.core.hang.stacks import agree, rank_label

# Functions the language or torch calls from a line on every rank (a module's `forward` from
# `model(x)`, an iterator's `__next__` from a `for`): no library decision in between.
_IMPLIED = re.compile(r"^(forward|__\w+__|<\w+>)$")


def _behind(busy: RankState, ahead: RankState) -> Parted | None:
    """parting(busy, ahead) where `ahead` waits further down that function than `busy`, on a line
    every `if` and loop of whose also holds busy's (no block of its own led it there)."""
    parted = parting(busy, ahead)
    if parted is None or parted[2] <= parted[0]:
        return None
    return parted if all(a <= parted[0] <= b for a, b, _ in parted[3].blocks) else None


def broke_out(early: RankState, busy: RankState) -> tuple[int, str, str] | None:
    """A loop `busy` is still in (where the paths part, around its line) that is not a walk over
    the data (`while True`, `for _ in range(steps)`) and has a guarded `break` / `return` of its
    own, where `early` waits further down, outside it: `early` took that jump. As (the jump's
    line, its kind, the loop's header)."""
    parted = _behind(busy, early)
    if parted is None:
        return None
    _, b_ctx, e_line, _, _ = parted
    for first, last, header in b_ctx.blocks:
        if header.startswith("if ") or first <= e_line <= last:
            continue
        if data_header(header) and not counted(header):
            continue  # a loop over the data also ends where the data does
        jump = next(((line, kind) for loop, line, kind in b_ctx.guarded_jumps if loop == first), None)
        if jump:
            return (*jump, header)
    return None


def relayed(odd: RankState, other: RankState) -> tuple[int, str, str] | None:
    """`odd` waits in a function that library code called from the line where the paths part (the
    line does not call it by name), while `other` waits further down the same function, past that
    line, on a path of no `if` or loop of its own. As (the line, its code, the function)."""
    parted = _behind(odd, other)
    if parted is None:
        return None
    o_line, o_ctx, _, _, depth = parted
    called = [f for f, _ in reversed(odd.path)][depth + 1 : depth + 2]
    hook = called[0].function if called else ""
    name = hook.rsplit(".", 1)[-1]  # py-spy names a method `Class.method`
    if not name or _IMPLIED.match(name) or called[0].where() in odd.direct:
        return None  # called from the line itself: a decorator's wrapper, no library between
    if re.search(rf"\b{re.escape(name)}\s*\(", o_ctx.code):
        return None  # called by name: its own control flow is the other readings'
    return o_line, o_ctx.code, hook


def relayed_why(
    odd: tuple[int | None, ...], other: tuple[int | None, ...], found: tuple[int, str, str]
) -> tuple[str, str]:
    """The evidence and the verdict for relayed()'s finding."""
    line, code, hook = found
    evidence = (
        f"{rank_label(odd)} {agree(odd, 'waits', 'wait')} in a collective inside {hook}(), which "
        f"library code called back from `{code}` (line {line}); {rank_label(other)} went past that "
        f"line without the call: the library decides per rank whether to run {hook}() (a log level, "
        "a handler or an option set on some ranks only), so its collective runs only where it did"
    )
    verdict = f"{rank_label(odd)} {agree(odd, 'is', 'are')} in a collective inside a callback ({hook}()) that only some ranks ran"
    return evidence, verdict
