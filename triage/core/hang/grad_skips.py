"""A collective issued once per parameter that has a gradient (`for p in model.parameters(): if
p.grad is not None: dist.all_reduce(p.grad)`, gradients averaged by hand instead of DDP).

`zero_grad()` sets gradients to None, and a parameter no operation of a rank's batch used (a head
or a branch of the model taken per batch: an auxiliary loss only for a rare class, a mixture
expert no token was routed to) has none after `backward()` on that rank. That rank skips its
collective, the ranks issue different numbers of collectives, and the one still in the guarded
loop waits for a partner the others never send (D19; D21 second, a collective under a test that
differs across ranks). The ranks past that `if` are the ones that skipped.
"""

from __future__ import annotations

import re

from triage.core.hang.classify import RankState

# `p.grad is not None`, `param.grad is None`, `p.grad != None`: a test of whether a gradient exists.
_GRAD_TEST = re.compile(r"\.grad\s*(is\s+not|is|!=|==)\s*None\b")


def unused_gradient(ahead: RankState, waiting: RankState) -> tuple[str, str, str] | None:
    """`waiting` waits in a collective under an `if` that tests a gradient for None (in any user
    frame of its stack), which `ahead`'s path does not stand in (no frame of that function inside
    the `if`): `ahead` had no gradient there. As (how, why for the verdict, the second entry)."""
    for frame, ctx in waiting.path:
        if ctx is None:
            continue
        guard = next(
            (b for b in reversed(ctx.blocks) if b[2].startswith("if ") and _GRAD_TEST.search(b[2])), None
        )
        if guard is None:
            continue
        first, last, header = guard
        if any(
            (f.file, f.function) == (frame.file, frame.function) and first <= f.line <= last
            for f, _ in ahead.path
        ):
            return None
        how = (
            f"`{header}` (line {first}, in {frame.function}()) issues it only for a parameter that has "
            "a gradient, and a parameter no operation of a rank's batch used (a branch of the model "
            "taken per batch) has none after `backward()` on that rank (`zero_grad()` sets gradients "
            "to None): the ranks issued different numbers of collectives"
        )
        return how, " (a parameter with no gradient on its batch)", "D21"
    return None
