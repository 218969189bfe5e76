"""Rank-conditional collectives meant to meet each other, and the rank that took neither branch.

A barrier matches any barrier: the "main process first" idiom puts one under `if local_rank not
in [-1, 0]:` (the others wait) and one under `if local_rank == 0:` (the main process joins them
once done). Ranks in the same collective at different lines, each under a rank test of its own,
are met there; the ranks waiting elsewhere took neither branch (a test on the global rank where
the other reads the local one, on a second node) and are the odd ones out.
"""

from __future__ import annotations

from typing import Protocol

from triage.core.hang.classify import RankState
from triage.core.hang.paths import context
from triage.core.hang.stacks import rank_label


class _Group(Protocol):
    @property
    def ranks(self) -> tuple[int | None, ...]: ...

    @property
    def state(self) -> RankState: ...


def paired_branches(groups: tuple[_Group, ...]) -> tuple[tuple[int, ...], str, str] | None:
    """Where two or more groups wait in one collective at different lines, each inside a rank test
    of its own line, and fewer ranks wait in other collectives: (those ranks, the evidence, the
    verdict); else None."""
    by_collective: dict[str, list[_Group]] = {}
    for group in groups:
        if group.state.kind == "collective" and group.state.user_frame is not None:
            by_collective.setdefault(group.state.collective, []).append(group)
    for name, met in by_collective.items():
        tests = [context(g.state).rank_condition for g in met]
        lines = {g.state.user_frame.where() for g in met if g.state.user_frame is not None}
        if len(met) < 2 or len(lines) < len(met) or any(t is None for t in tests):
            continue
        rest = [g for g in groups if all(g is not m for m in met)]
        met_ranks = sum(len(g.ranks) for g in met)
        odd = tuple(r for g in rest for r in g.ranks if r is not None)
        if not rest or any(g.state.kind != "collective" for g in rest) or not 0 < len(odd) < met_ranks:
            continue
        branches = "; ".join(
            f"{rank_label(g.ranks)} under `if {t[1]}:` (line {t[0]})"
            for g, t in zip(met, tests, strict=True)
            if t
        )
        others = "; ".join(f"{rank_label(g.ranks)} {g.state.describe()}" for g in rest)
        evidence = (
            f"{name}() at {len(met)} lines, each under a rank test, meant to meet each other: {branches}. "
            f"{rank_label(odd)} took neither branch ({others}): its rank fails every test, so the "
            f"{name}() waits for it for ever",
        )
        verdict = (
            f"{rank_label(odd)} took none of the rank-conditional {name}() branches the other ranks met in"
        )
        return tuple(sorted(odd)), evidence[0], verdict
    return None
