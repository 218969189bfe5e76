"""Ranks that wait in different collectives: which of them took another path, and why.

The rules read like an engineer comparing the stacks: a collective under a rank-dependent `if`
(or past an early `return` under one) is the bug (D21); a send or receive with no partner is a
desync (D19); a rank waiting past the end of the loop the others are still in ran out of batches
(D9), or left a loop on a test of its own values (D19); a rank past a call whose function
`return`s early under a test, before the collective the others wait in there, skipped it (D21);
a `continue` / `break` or a swallowed exception that jumped over the others' collective is a
skip (D19); a collective reached through a retry loop (`try` in a loop, its `except` going round
again) is issued once more on that rank (D19); one inside an `except` clause runs only on the
ranks that raised (D21); a collective reached through an `if` or a loop the other ranks passed
without entering is a collective under control flow that differs across ranks (D21; D19 where the
test reads a random draw or a running count of the rank's own); otherwise a desync (D19). A
collective in a signal handler runs wherever the signal landed (D19); a rank in the `__exit__` of
a `with` whose body the others are in left that body first (D20 by an exception, D19 where it is
swallowed); the base case of a recursion with a collective per level ends it sooner (D19). The odd ranks out are the side that took the other path, or the rest where they are fewer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from triage.core.hang.classify import RankState
from triage.core.hang.loop_exits import left_otherwise, skip_entries, skip_why
from triage.core.hang.outer_exits import broke_out, relayed, relayed_why
from triage.core.hang.paired_branches import paired_branches
from triage.core.hang.paths import (
    branch_only,
    conditional_only,
    context,
    how_skipped,
    in_handler,
    left_by_jump,
    left_early,
    past_loop,
    raised_through,
    recursive,
    retried,
    returned_early,
    signalled,
    skipped_iteration,
    unwound,
)
from triage.core.hang.seeds import drawn
from triage.core.hang.stacks import agree, rank_label

T = TypeVar("T")


@dataclass(frozen=True)
class Group:
    """Ranks doing the same thing."""

    ranks: tuple[int | None, ...]
    state: RankState


def describe_groups(groups: tuple[Group, ...]) -> str:
    """What each group of ranks is doing, in one line (the evidence every reading starts from)."""
    return "; ".join(f"{rank_label(g.ranks)} {g.state.describe()}" for g in groups)


@dataclass(frozen=True)
class Diagnosis:
    """An entry the hang points at, with the evidence."""

    entry: str
    evidence: tuple[str, ...]


# What a rank's collective was issued by when it is a sharded model's parameter gather.
SHARDED = ("FSDP", "ZeRO")
# Blocking point-to-point calls: every rank of the world in one of them is a cycle of waits.
POINT_TO_POINT = frozenset(
    {"recv", "send", "irecv", "isend", "batch_isend_irecv", "recv_object_list", "send_object_list"}
)


def ints(ranks: tuple[int | None, ...]) -> tuple[int, ...]:
    """The known ranks, sorted."""
    return tuple(sorted(r for r in ranks if r is not None))


def _rank_tests(state: RankState) -> tuple[tuple[str, int, str], ...]:
    """The rank tests around `state`'s stack, innermost first (only its own line's, from old JSON)."""
    if state.conditions:
        return state.conditions
    test = context(state).rank_condition
    return ((state.user_frame.file, *test),) if test and state.user_frame else ()


def rank_branch(groups: tuple[Group, ...]) -> tuple[Group, tuple[str, int, str]] | None:
    """A group whose stack sits in a branch taken on some ranks only: under a rank test (around its
    own line, or around a call further up: `if rank == 0: save_checkpoint()` with the barrier
    inside) that the other groups' stacks are not under. A test around every stack singles no
    rank out."""
    shared = set.intersection(*(set(_rank_tests(g.state)) for g in groups))
    found = [(g, [t for t in _rank_tests(g.state) if t not in shared]) for g in groups]
    own_line = [
        (g, tests[0]) for g, tests in found if tests and context(g.state).rank_condition == tests[0][1:]
    ]
    further_up = [(g, tests[0]) for g, tests in found if tests]
    chosen = own_line or further_up
    return chosen[0] if chosen else None


# new_group() names each group by how many groups the rank has made: one made on some ranks only
# (under a rank test) shifts the count, and the next group's members look for each other in vain.
GROUPS_WHY = "the ranks have made different process groups (a new_group() called on some ranks only)"
_GROUPS_DIVERGED = (
    "in new_group(): every rank of the world must call new_group(), in the same order, even for a "
    "group it is not in; a group created on some ranks only (under a rank test) makes the next one's "
    "members wait for each other for ever"
)


def wait_in_new_group(ranks: tuple[int | None, ...]) -> str:
    """Why `ranks` wait in new_group() for ever."""
    return f"{rank_label(ranks)} {'waits' if len(ranks) == 1 else 'wait'} {_GROUPS_DIVERGED}"


def fewer(side: Group, groups: tuple[Group, ...]) -> tuple[int, ...]:
    """The odd ranks out when `side` took the other path: `side`, unless the rest are fewer (three
    ranks in a collective under a test, one past it: that one is the odd rank out)."""
    rest = tuple(r for g in groups if g is not side for r in g.ranks)
    return ints(rest) if 0 < len(rest) < len(side.ranks) else ints(side.ranks)


def _waits_at(group: Group) -> str:
    where = group.state.user_frame.where() if group.state.user_frame else "?"
    return f"{rank_label(group.ranks)} {agree(group.ranks, 'waits', 'wait')} in {group.state.collective}() at {where}"


def _left_first(early: Group, busy: Group, block: str) -> str:
    """`early` waits in the closing part of `block` (a `finally`, an `__exit__`) whose body `busy`
    is still in."""
    are = "is" if len(busy.ranks) == 1 else "are"
    return (
        f"{_waits_at(early)}, in {block} whose body {rank_label(busy.ranks)} {are} still in "
        f"({busy.state.describe()}): {rank_label(early.ranks)} left that body first, "
    )


def _first_pair(
    groups: tuple[Group, ...], test: Callable[[RankState, RankState], T | None]
) -> tuple[Group, Group, T] | None:
    """The first two different groups (a, b) for which `test(a, b)` finds something, with it."""
    for a in groups:
        for b in groups:
            found = test(a.state, b.state) if a is not b else None
            if found:
                return a, b, found
    return None


def _store_crossed(
    groups: tuple[Group, ...], described: str
) -> tuple[list[Diagnosis], tuple[int, ...], str] | None:
    """Ranks waiting on a store key while the others wait in a collective: the key is set further
    on the others' path, past the collective the waiters would reach only once they have it (two
    ways of waiting crossed). The others are the odd ranks; a rank test around their collective
    makes it a collective on some ranks only (D21)."""
    keyed = [g for g in groups if g.state.collective.startswith("store.")]
    rest = [g for g in groups if g not in keyed]
    if not keyed or not rest:
        return None
    waiters = tuple(r for g in keyed for r in g.ranks)
    holders = tuple(r for g in rest for r in g.ranks)
    tested = any(_rank_tests(g.state) for g in rest)
    lines = (
        f"{rank_label(waiters)} {keyed[0].state.describe()}: a key that {rank_label(holders)} would "
        f"set further on, past {rest[0].state.collective}() where {'it waits' if len(holders) == 1 else 'they wait'}"
        + (" under a rank test" if tested else "")
        + " for the waiters, who reach that collective only once they have the key",
        described,
    )
    verdict = f"{rank_label(holders)} {agree(holders, 'waits', 'wait')} in a collective before setting the store key the others wait for"
    entries = ["D21", "D19"] if tested else ["D19", "D21"]
    return [Diagnosis(e, lines) for e in entries], ints(holders), verdict


def mismatch(groups: tuple[Group, ...]) -> tuple[list[Diagnosis], tuple[int, ...], str]:
    """The entries, the odd ranks out and the verdict for `groups` waiting in different collectives."""
    described = describe_groups(groups)
    evidence: tuple[str, ...]
    forming = [g for g in groups if g.state.collective == "new_group"]
    if forming:
        ranks = tuple(r for g in forming for r in g.ranks)
        lines = (wait_in_new_group(ranks), described)
        verdict = f"{rank_label(ranks)} {agree(ranks, 'waits', 'wait')} in new_group() while other ranks are past it: {GROUPS_WHY}"
        return [Diagnosis("D21", lines), Diagnosis("D19", lines)], ints(ranks), verdict
    # send / recv are called on some ranks only by design: a rank test around them is no bug, a
    # receive (or send) that waits while the other ranks are past it has no partner.
    p2p = [g for g in groups if g.state.collective in POINT_TO_POINT]
    if p2p and len(p2p) < len(groups):
        ranks = tuple(r for g in p2p for r in g.ranks)
        lines = (
            f"{rank_label(ranks)} {p2p[0].state.describe()}: no rank is sending (or receiving) the "
            "matching message, the others are past it",
            described,
        )
        verdict = f"{rank_label(ranks)} {agree(ranks, 'waits', 'wait')} in {p2p[0].state.collective}() with no matching partner"
        return [Diagnosis("D19", lines), Diagnosis("D21", lines)], ints(ranks), verdict
    stored = _store_crossed(groups, described)
    if stored is not None:
        return stored
    handled = [(g, signalled(g.state)) for g in groups]
    if any(h for _, h in handled) and not all(h for _, h in handled):
        odd, (frame, sig) = next((g, h) for g, h in handled if h)
        evidence = (
            f"{_waits_at(odd)}, inside {frame.function}(), the {sig} handler (line {frame.line}): a "
            "handler runs wherever the main thread is when the signal lands, so its collective comes "
            "at a different point of each rank's sequence (and a rank blocked in a collective runs "
            "its own handler only once that collective returns)",
            described,
        )
        verdict = f"{rank_label(odd.ranks)} issued a collective from a signal handler ({sig})"
        return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], ints(odd.ranks), verdict
    paired = paired_branches(groups)
    if paired is not None:
        return (
            [Diagnosis("D21", (paired[1], described)), Diagnosis("D19", (described,))],
            paired[0],
            paired[2],
        )
    branch = rank_branch(groups)
    if branch is not None:
        odd, (file, line, test) = branch
        where = odd.state.user_frame.where() if odd.state.user_frame else ""
        if context(odd.state).rank_condition == (line, test):
            inside = f"inside `if {test}:` (line {line})"
        else:
            inside = f"reached through a call under `if {test}:` at {file}:{line}"
        evidence = (
            f"{rank_label(odd.ranks)} {agree(odd.ranks, 'waits', 'wait')} in {odd.state.collective}() at {where}, {inside}, "
            "a branch the other ranks do not take",
            described,
        )
        verdict = f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective that only some ranks reach (`if {test}:`)"
        return [Diagnosis("D21", evidence), Diagnosis("D19", (described,))], fewer(odd, groups), verdict
    thrown = _first_pair(groups, raised_through)
    if thrown:
        early, busy, (start, final, only_raised) = thrown
        evidence = (
            _left_first(early, busy, f"the `finally` (line {final}) of the `try` at line {start}")
            + (
                "by an exception (the loops in it run as many times on every rank)"
                if only_raised
                else "by an exception or by running out of data"
            )
            + "; an exception's traceback is printed only once the `finally` ends, so it never is",
            described,
        )
        verdict = (
            f"{rank_label(early.ranks)} left a `try` early (most likely it raised) and waits in its `finally`"
        )
        entries = ["D20", "D9"] if only_raised else ["D9", "D20"]
        return [Diagnosis(e, evidence) for e in entries], ints(early.ranks), verdict
    exited = _first_pair(groups, unwound)
    if exited:
        early, busy, (line, only_raised, swallowed) = exited
        evidence = (
            _left_first(early, busy, f"the `__exit__` of the `with` at line {line}")
            + ("by an exception" if only_raised else "by an exception, a jump or running out of data")
            + (
                ", which is then swallowed (by the manager or an `except` around the `with`): the "
                "rank goes on past collectives the others are still in"
                if swallowed
                else "; its traceback is printed only once `__exit__` returns, so it never is"
            ),
            described,
        )
        verdict = f"{rank_label(early.ranks)} left a `with` block early (most likely it raised) and waits in its `__exit__`"
        entries = ["D20", "D19"] if only_raised and not swallowed else ["D19", "D20"]
        return [Diagnosis(e, evidence) for e in entries], ints(early.ranks), verdict
    for early in groups:
        for busy in groups:
            if early is not busy and (
                past_loop(early.state, busy.state)
                or left_early(early.state, busy.state)
                or broke_out(early.state, busy.state)
            ):
                evidence = (
                    f"{rank_label(early.ranks)} left the loop and waits in {early.state.collective}() at "
                    f"{early.state.user_frame.where() if early.state.user_frame else '?'}, while "
                    f"{rank_label(busy.ranks)} {agree(busy.ranks, 'is', 'are')} still inside it ({busy.state.describe()})",
                )
                skip = skipped_iteration(early.state, busy.state)
                if skip and (skip[3] or not left_by_jump(early.state, busy.state)):
                    line, test, header, non_finite, word = skip
                    evidence = (
                        f"{evidence[0]}; the `{word}` at line {line} under `if {test}:` skipped the rest "
                        f"of an iteration of `{header}` on {rank_label(early.ranks)}, its collectives "
                        "with it, so it ran ahead of the others" + skip_why(test, non_finite),
                    )
                    verdict = (
                        f"{rank_label(early.ranks)} skipped a step (`if {test}: {word}`) the others took"
                    )
                    entries = skip_entries(test, non_finite)
                    return [Diagnosis(e, evidence) for e in entries], ints(early.ranks), verdict
                way = left_otherwise(early.state, busy.state, early.ranks, busy.ranks)
                if way is not None:
                    return (
                        [Diagnosis(e, (f"{evidence[0]}; {way.why}", described)) for e in way.entries],
                        fewer(busy, groups) if way.busy_odd else ints(early.ranks),
                        way.verdict,
                    )
                jump = left_by_jump(early.state, busy.state) or broke_out(early.state, busy.state)
                if jump:
                    left = (
                        f"`{jump[2]}` (line {jump[0]}) tests values of each rank's own, so "
                        f"{rank_label(early.ranks)} left it when its test turned false"
                        if jump[1] == "test"
                        else f"`{jump[2]}` {'runs as many times on every rank' if jump[2].startswith('for') else 'ends only through its jumps'}, so {rank_label(early.ranks)} "
                        f"left it through the `{jump[1]}` at line {jump[0]}"
                    )
                    evidence = (
                        f"{evidence[0]}; {left}: a decision taken on its own values (a rank-local "
                        "metric or flag) that the others did not take",
                    )
                    verdict = (
                        f"{rank_label(early.ranks)} left the loop on a decision the other ranks did not take"
                    )
                    if busy.state.via.startswith(SHARDED):
                        evidence = (
                            f"{evidence[0]}; every forward of a sharded model ({busy.state.via}) "
                            "gathers parameters from all ranks, so a loop of forwards whose length "
                            "each rank decides (generation up to its own end token) must run as "
                            "many times everywhere",
                        )
                        verdict = f"{verdict}, in a loop of sharded-model forwards"
                        return (
                            [Diagnosis("D21", evidence), Diagnosis("D19", evidence)],
                            ints(early.ranks),
                            verdict,
                        )
                    return [Diagnosis("D19", evidence), Diagnosis("D9", evidence)], ints(early.ranks), verdict
                verdict = f"{rank_label(early.ranks)} ran out of batches before the others"
                return [Diagnosis("D9", evidence), Diagnosis("D22", evidence)], fewer(early, groups), verdict
    returned = _first_pair(groups, returned_early)
    if returned:
        early, busy, exit_ = returned
        evidence = (
            f"{rank_label(early.ranks)} returned from {exit_[2]}() early, through `if {exit_[1]}:` "
            f"(line {exit_[0]}), and waits in {early.state.collective}() past the call, while "
            f"{rank_label(busy.ranks)} {'is' if len(busy.ranks) == 1 else 'are'} {busy.state.describe()}: "
            "the collective after that return "
            "runs only where the test is false (a test on each rank's own data)",
            described,
        )
        verdict = f"{rank_label(early.ranks)} returned early and skipped a collective the others wait in"
        if recursive(busy.state, exit_[2]):
            evidence = (
                f"{evidence[0]}; {exit_[2]}() calls itself and that return is where its recursion "
                "ends: the depth, and the number of collectives, follow each rank's own data",
                described,
            )
            verdict = f"{rank_label(early.ranks)} ended a recursion with a collective at each level sooner"
            return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], ints(early.ranks), verdict
        return [Diagnosis("D21", evidence), Diagnosis("D19", evidence)], ints(early.ranks), verdict
    for ahead in groups:
        for waiting in groups:
            how = how_skipped(ahead.state, waiting.state) if ahead is not waiting else None
            if how:
                text, why, second = how
                evidence = (
                    f"{rank_label(ahead.ranks)} skipped {waiting.state.collective}() at "
                    f"{waiting.state.user_frame.where() if waiting.state.user_frame else '?'}: {text}, and "
                    f"{rank_label(waiting.ranks)} {agree(waiting.ranks, 'waits', 'wait')} there",
                    described,
                )
                verdict = f"{rank_label(ahead.ranks)} skipped a collective the others wait in{why}"
                return (
                    [Diagnosis("D19", evidence), Diagnosis(second, evidence)],
                    fewer(ahead, groups),
                    verdict,
                )
    again = _first_pair(groups, retried)
    if again:
        odd, _, (start, handler, header) = again
        evidence = (
            f"{_waits_at(odd)}, reached through a retry loop (`{header}`, `try` at line {start}, its "
            f"`except` at line {handler} goes round again): an attempt that failed after the "
            f"collective issues it once more on {rank_label(odd.ranks)} only",
            described,
        )
        verdict = f"{rank_label(odd.ranks)} issued a collective again in a retry loop"
        return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], ints(odd.ranks), verdict
    caught = _first_pair(groups, in_handler)
    if caught:
        odd, other, (line, clause) = caught
        evidence = (
            f"{_waits_at(odd)}, inside `{clause}:` (line {line}): only a rank whose `try` raised runs "
            f"it, and {rank_label(other.ranks)} did not raise",
            described,
        )
        verdict = f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective inside an exception handler the others did not enter"
        return [Diagnosis("D21", evidence), Diagnosis("D19", evidence)], ints(odd.ranks), verdict
    branched = _first_pair(groups, branch_only)
    if branched:
        odd, other, (line, header) = branched
        evidence = (
            f"{_waits_at(odd)}, reached through `{header}` (line {line}), which "
            f"{rank_label(other.ranks)} passed without entering: a collective under a condition or "
            "loop that differs across ranks",
            described,
        )
        verdict = f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective that only some ranks reach (`{header}`)"
        if draw := drawn(header, odd.state):
            evidence = (
                f"{evidence[0]}; {draw}, and each rank's generator is seeded "
                "apart, so the ranks' draws differ",
                described,
            )
            return [Diagnosis("D19", evidence), Diagnosis("D21", evidence)], fewer(odd, groups), verdict
        return [Diagnosis("D21", evidence), Diagnosis("D19", evidence)], fewer(odd, groups), verdict
    guarded = _first_pair(groups, conditional_only)
    if guarded:
        odd, other, (line, header, drifts) = guarded
        evidence = (
            f"{_waits_at(odd)}, reached through `{header}` (line {line}); {rank_label(other.ranks)} "
            f"{other.state.describe()}, on a path with no such test: the ranks' tests differed"
            + (
                ", and it reads a running count each rank keeps of its own (a step or token counter), "
                "which the ranks cross at different steps"
                if drifts
                else ""
            ),
            described,
        )
        verdict = f"{rank_label(odd.ranks)} {agree(odd.ranks, 'is', 'are')} in a collective only some ranks reach (`{header}`)"
        entries = ["D19", "D21"] if drifts or drawn(header, odd.state) else ["D21", "D19"]
        return [Diagnosis(e, evidence) for e in entries], fewer(odd, groups), verdict
    hooked = _first_pair(groups, relayed)
    if hooked:
        why, verdict = relayed_why(hooked[0].ranks, hooked[1].ranks, hooked[2])
        return [Diagnosis(e, (why, described)) for e in ("D21", "D19")], fewer(hooked[0], groups), verdict
    sizes = Counter(len(g.ranks) for g in groups)
    largest = max(len(g.ranks) for g in groups)
    odd_ranks = (
        ()
        if sizes[largest] > 1
        else ints(tuple(r for g in groups if len(g.ranks) < largest for r in g.ranks))
    )
    verdict = "the ranks wait in different collectives (their collective sequences diverged)"
    return [Diagnosis("D19", (described,)), Diagnosis("D21", (described,))], odd_ranks, verdict
