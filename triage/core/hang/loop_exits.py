"""How a rank got out of a loop another rank is still in, where the end of the data is not the
only way (mismatch.py asks before it reads a rank out of the loop as out of batches, D9):

- The loop has a broad `except` clause that leaves it (`except Exception: break`, a bare
  `except:` that returns): a rank whose step raised there (a DataLoader worker killed, a corrupt
  record, an error in its forward) left the loop with its error swallowed while the others go
  on. A crash kept from ending the process (D20; D9 second, since the end of the data leaves that
  loop too). The rank out of the loop is the odd one.
- The ranks still in the loop wait inside a `try` of it whose `except` swallows the error and
  goes on to the next iteration (`except Exception: log; continue`): a rank whose step raised
  there skipped the rest of that step, its collectives with it, and ran the loop out one
  collective ahead of the others (D19, D20 second, as a skip inside the loop reads). The rank out
  of the loop is the odd one.
- Every loop the busy ranks are in counts to a bound every rank shares (`for step in range(60)`)
  and has no `break` or `return`: the rank out of it ran all its iterations, so the ranks still
  inside are behind, held in a collective the others never issued. Where that collective is
  reached through an `if` the others' path does not go through (a test on each rank's own data,
  a graph break on one rank; not a test of the loop's counter, which every rank passes at the
  same iteration), it is a collective only some ranks reach (D21; D19 first where the
  test reads a random draw or a running count of the rank's own). The busy ranks are the odd ones.

- The rank out of the loop waits inside an `except` clause of a `try` whose body holds the loop
  the others are in, a clause that does not raise again: it raised in the loop and left it there,
  the others did not. Where the clause catches an interrupt (`KeyboardInterrupt`, `SystemExit`, a
  signal turned into an exception: Ctrl-C, a watchdog or a scheduler's preemption signal that
  reached that rank alone) the rank chose to stop and go on to its own wrap-up (D19, D20 second);
  any other error is a crash kept from ending the process (D20, D19 second). The rank in the
  clause is the odd one.

A step skipped under a test of the batch being empty (`if len(x) == 0: continue`, `numel() == 0`)
is no decision of the rank's own: its shard ran out before the others' (the last batch of an
uneven split), so it ran fewer batches than they did (D9 first, D19 second): empty_batch_test.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from triage.core.hang.classify import RankState
from triage.core.hang.paths import RANDOM_DRAW, busy_loops, conditional_only, counted, left_by_jump, parting
from triage.core.hang.stacks import agree, rank_label

_TARGET = re.compile(r"[A-Za-z_]\w*")
_EMPTY = re.compile(
    r"^not\s+len\(|\blen\([^()]*\)\s*(==\s*0|<\s*1)\b|\.numel\(\)\s*==\s*0\b"
    r"|\.(shape\[0\]|size\(0?\))\s*==\s*0\b"
)


def empty_batch_test(test: str) -> bool:
    """Whether an `if` test asks whether the rank's batch is empty (`len(x) == 0`, `not len(b)`,
    `x.numel() == 0`, `x.shape[0] == 0`): a step skipped there is a shard out of data (D9)."""
    return _EMPTY.search(test.strip()) is not None


def skip_entries(test: str, non_finite: bool) -> list[str]:
    """The entries, best first, of a step skipped under `if <test>: continue`."""
    return ["D20", "D19"] if non_finite else ["D9", "D19"] if empty_batch_test(test) else ["D19", "D9"]


def skip_why(test: str, non_finite: bool) -> str:
    """Why the step was skipped, said after the skip itself."""
    if non_finite:
        return ": its values went NaN or inf"
    if empty_batch_test(test):
        return ": its batch was empty, its share of the data ran out before the others' (fewer batches)"
    return ": a decision of its own"


class Exit(NamedTuple):
    """Another way out of the loop: the entries, best first, whether the ranks still in the loop
    (not the one out of it) are the odd ones, why (evidence) and the verdict."""

    entries: tuple[str, str]
    busy_odd: bool
    why: str
    verdict: str


def _raised_out(early: RankState, busy: RankState, ranks: tuple[int | None, ...]) -> Exit | None:
    for first, _, header, ctx in busy_loops(early, busy):
        clause = next(((line, text) for loop, line, text in ctx.error_exits if loop == first), None)
        if clause is None:
            continue
        why = (
            f"`{header}` (line {first}) is also left through `{clause[1]}:` (line {clause[0]}), "
            f"which swallows any error of a step: {rank_label(ranks)} most likely raised there (a "
            "DataLoader worker that died, a corrupt record, an error in its step), left the loop with "
            "its traceback unseen and went on, while the others stayed in it; running out of data "
            "first would read the same"
        )
        verdict = f"{rank_label(ranks)} left the loop through `{clause[1]}` (an error swallowed) while the others go on"
        return Exit(("D20", "D9"), False, why, verdict)
    return None


# An exception that is a request to stop rather than an error: Ctrl-C, sys.exit, a signal.
_INTERRUPT = re.compile(r"KeyboardInterrupt|SystemExit|Signal|Interrupt|Preempt|Terminat", re.IGNORECASE)


def _caught_out(early: RankState, busy: RankState, ranks: tuple[int | None, ...]) -> Exit | None:
    parted = parting(early, busy)
    if parted is None or parted[1].handler is None or parted[3].swallowed is None:
        return None
    e_line, _, b_line, _, _ = parted
    start, _, end = parted[3].swallowed
    line, clause = parted[1].handler
    loops = [h for first, _, h, _ in busy_loops(early, busy) if start < first <= b_line]
    if not (start < b_line < line <= e_line <= end) or not loops:
        return None
    stopped = _INTERRUPT.search(clause) is not None
    why = (
        f"{rank_label(ranks)} {agree(ranks, 'waits', 'wait')} inside `{clause}:` (line {line}) of the "
        f"`try` at line {start}, whose body holds `{loops[0]}` the others are still in: it raised "
        "there and left the loop through that clause, which does not raise again"
        + (
            " (an interrupt: Ctrl-C, a watchdog's or a scheduler's signal that reached it alone), and "
            "went on to its own wrap-up: a decision to stop the others did not take"
            if stopped
            else " (an error swallowed: a crash kept from ending the process)"
        )
    )
    verdict = f"{rank_label(ranks)} left the loop through `{clause}` while the others go on"
    return Exit(("D19", "D20") if stopped else ("D20", "D19"), False, why, verdict)


def _swallowed_step(early: RankState, busy: RankState, ranks: tuple[int | None, ...]) -> Exit | None:
    parted = parting(early, busy)
    if parted is None:
        return None
    e_line, _, b_line, b_ctx, _ = parted
    loops = {b[0]: b[2] for b in b_ctx.blocks if not b[2].startswith("if ") and not b[0] <= e_line <= b[1]}
    for first, start, end, clause in b_ctx.error_skips:
        if first not in loops or not start < b_line <= end:
            continue
        why = (
            f"the others wait inside the `try` at line {start} of `{loops[first]}` (line {first}), "
            f"whose `{clause}:` swallows the error and goes on to the next iteration: "
            f"{rank_label(ranks)} most likely raised in that `try` once, skipped the rest of that "
            "step, its collectives with it, and so finished the loop one collective ahead"
        )
        verdict = f"{rank_label(ranks)} skipped a step's collectives through `{clause}` that goes on"
        return Exit(("D19", "D20"), False, why, verdict)
    return None


def _behind(early: RankState, busy: RankState, ranks: tuple[int | None, ...]) -> Exit | None:
    loops = busy_loops(early, busy)
    if not loops or not all(counted(header) for _, _, header, _ in loops) or left_by_jump(early, busy):
        return None
    found = conditional_only(busy, early)
    if found is None:
        return None
    line, header, drifts = found
    # A test of the loop's own counter (`if step % 10 == 0`, `if step == warmup`) holds on every
    # rank at the same iteration: a rank out of the loop had fewer iterations, not another test.
    counters = {name for _, _, h, _ in loops for name in _TARGET.findall(h.split(" in ", 1)[0])}
    if any(re.search(rf"\b{name}\b", header) for name in counters - {"for", "async"}):
        return None
    why = (
        f"every loop {rank_label(ranks)} {'is' if len(ranks) == 1 else 'are'} in counts to a bound every "
        "rank shares and has no `break` or `return`, so the rank out of it ran all its iterations; "
        f"{rank_label(ranks)} {'is' if len(ranks) == 1 else 'are'} held behind in a collective reached "
        f"through `{header}` (line {line}), a test the other rank's path does not go through: a "
        "collective only the ranks whose test held issue"
    )
    verdict = (
        f"{rank_label(ranks)} {agree(ranks, 'is', 'are')} in a collective only some ranks reach (`{header}`)"
    )
    first = "D19" if drifts or RANDOM_DRAW.search(header) else "D21"
    return Exit((first, "D21" if first == "D19" else "D19"), True, why, verdict)


def left_otherwise(
    early: RankState, busy: RankState, early_ranks: tuple[int | None, ...], busy_ranks: tuple[int | None, ...]
) -> Exit | None:
    """How `early` (out of a loop `busy` is still in) left it, other than at the end of its data."""
    return (
        _caught_out(early, busy, early_ranks)
        or _raised_out(early, busy, early_ranks)
        or _swallowed_step(early, busy, early_ranks)
        or _behind(early, busy, busy_ranks)
    )
