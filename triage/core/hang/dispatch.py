"""Ranks in different collectives where the other path was set up earlier than the stacks show.

- A collective in a method reached through a loop over a collection of objects (`for callback in
  self.callbacks: getattr(callback, hook)(...)`), whose class the source makes only under an `if`
  (a callback registered from a per-rank config, a checkpoint hook enabled on the main process):
  only the ranks that made the object run it; the others' loops call no such method and went on
  (D21, a collective only some ranks reach; D19 second). That rank is the odd one.
- A collective under a periodic test (`if step % log_every == 0`) that every rank takes at the
  same iteration, while the others wait in a collective of the same loop that a guarded
  `continue` before it lets a rank skip (`if not batch.any(): continue`): the rank that skipped
  is an iteration ahead, so it reaches the periodic collective while the others are still in the
  one it skipped (D19, a collective sequence that diverged by a rank-local skip; D21 second).
"""

from __future__ import annotations

import itertools
import re

from triage.core.hang.mismatch import Diagnosis, Group, describe_groups, fewer, rank_branch
from triage.core.hang.paths import conditional_only, parting
from triage.core.hang.stacks import Frame, LineContext, agree, rank_label

Reading = tuple[list[Diagnosis], tuple[int, ...], str]

# `for cb in self.callbacks`: the loop's target, to find a method of it called on the line
# (`cb.on_end(...)`, `getattr(cb, hook)(...)`; not `step(cb)`, which passes it on).
_FOR_TARGET = re.compile(r"^(?:async )?for (?P<target>[A-Za-z_]\w*) in ")
_PERIODIC = re.compile(r"%[^%=]*[!=]=\s*0\b")


def _dispatched(group: Group) -> tuple[Frame, LineContext, str] | None:
    """The method of `group`'s path whose class is made only under an `if`, called from a loop over
    objects (the loop's target is called on the caller's line): (its frame, its context, the
    caller's loop header)."""
    for (_, c_ctx), (frame, ctx) in itertools.pairwise(reversed(group.state.path)):
        if ctx is None or not ctx.made_if or c_ctx is None or c_ctx.loop is None:
            continue
        header = next((h for a, b, h in c_ctx.blocks if (a, b) == c_ctx.loop), "")
        found = _FOR_TARGET.match(header)
        target = found.group("target") if found else ""
        if target and re.search(rf"\b{target}\.\w+\s*\(|\bgetattr\(\s*{target}\b", c_ctx.code):
            return frame, ctx, header
    return None


def _registered(groups: tuple[Group, ...]) -> Reading | None:
    for odd in groups:
        found = _dispatched(odd)
        if found is None:
            continue
        frame, ctx, header = found
        others = [g for g in groups if g is not odd]
        if any((f.file, f.function) == (frame.file, frame.function) for g in others for f, _ in g.state.path):
            continue
        evidence = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() inside {frame.function}() "
            f"(line {frame.line}), called through `{header}`; the source makes that object only under "
            f"`if {ctx.made_if}:`, so only the ranks whose test held registered it and run its "
            "collective, and the other ranks' loops went on without it",
            describe_groups(groups),
        )
        verdict = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective of an object only some ranks made "
            f"(`if {ctx.made_if}:`)"
        )
        return [Diagnosis("D21", evidence), Diagnosis("D19", evidence)], fewer(odd, groups), verdict
    return None


def _periodic_after_skip(groups: tuple[Group, ...]) -> Reading | None:
    for odd in groups:
        for other in groups:
            found = conditional_only(odd.state, other.state) if odd is not other else None
            parted = parting(odd.state, other.state) if found else None
            if found is None or parted is None or not _PERIODIC.search(found[1]):
                continue
            _, o_ctx, b_line, _, _ = parted
            loop = o_ctx.loop
            skip = next((s for s in o_ctx.skips if loop and loop[0] < s[0] < b_line <= loop[1]), None)
            if skip is None:
                continue
            evidence = (
                f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() reached through "
                f"`{found[1]}` (line {found[0]}), a test every rank passes at the same iteration, "
                f"while {rank_label(other.ranks)} {other.state.describe()} in the same loop; the "
                f"`continue` at line {skip[0]} (under `if {skip[1]}:`) skips that collective on the "
                "ranks whose test held, so they run an iteration ahead and meet the periodic "
                "collective while the others are still in the one they skipped",
                describe_groups(groups),
            )
            verdict = (
                f"{rank_label(odd.ranks)} ran ahead by skipping a step (`if {skip[1]}: continue`) and "
                f"waits in a periodic collective (`{found[1]}`)"
            )
            return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], fewer(odd, groups), verdict
    return None


def set_up_apart(groups: tuple[Group, ...]) -> Reading | None:
    """The reading of `groups` (in different collectives) where an object made on some ranks only,
    or a skip earlier in the loop, put the ranks on different paths; None where a rank test around
    a collective says more (mismatch.py reads that one)."""
    if rank_branch(groups) is not None:
        return None
    return _registered(groups) or _periodic_after_skip(groups)
