"""Which rank a failure belongs to: the first failure's rank when the line that shows it carries
none, the worker torchrun's summary names first, the mp.spawn peer that really died, and which
ranks only waited for the first failure or never arrived."""

from __future__ import annotations

import dataclasses
import re

from triage.core.logscan.rules import is_context, is_launcher, peer_gone
from triage.core.logscan.scanner import Event, Scan
from triage.core.logscan.structure import SIGTERM_EXIT
from triage.core.logscan.unprefixed import bare_owner


def with_rank(first: Event | None, events: list[Event], scan: Scan) -> Event | None:
    """A first failure printed without a rank takes the rank of a later line that repeats it
    (`CUDA error: ...` printed bare, then by the rank's watchdog as `[Rank 1] ... CUDA error: ...`),
    or the only rank the log names at all."""
    if first is None or first.rank is not None:
        return first
    if len(scan.ranks_seen) == 1:
        return _replace_rank(first, next(iter(scan.ranks_seen)))
    message = first.text.split(": ", 1)[-1].strip()
    for event in events:
        if event.rank is None or event is first or event.kind == "exit":
            continue
        same_entry = first.kind == "hit" and event.kind == "hit" and event.entry_id == first.entry_id
        if same_entry or (len(message) >= 12 and message in event.text):
            return _replace_rank(first, event.rank)
    if (owner := bare_owner(first, events, scan.ranks_seen)) is not None:  # the others only waited
        return _replace_rank(first, owner)
    # A C++ abort prints no rank prefix (it bypasses Python's excepthook); the launcher says which
    # worker died of its own failure (SIGABRT, a segfault, an exit status) rather than its SIGTERM.
    died = {e.rank for e in events if e.kind == "exit" and e.real and e.rank is not None}
    if len(died) == 1 and first.kind in ("terminate", "abort", "hit"):
        return _replace_rank(first, died.pop())
    # Every worker failed on its own, printing the same error without a rank (before the process
    # group exists, torch puts no `[rankN]:` in front): torchrun's summary says which was first.
    if scan.root_cause_rank in died and first.kind in ("terminate", "abort", "hit", "exception"):
        return _replace_rank(first, scan.root_cause_rank)
    return first


# ProcessGroupNCCL's watchdog: the first rank whose collective timed out asks every rank to dump its
# flight recorder, and the others print whose timeout it was (a group rank: only the default group's
# is a global one), or "this local rank" on the rank that timed out itself.
_DUMP_FROM = re.compile(
    r"(?:\(default_pg\) Rank \d+\]\s*)?Received a dump signal due to a collective timeout from\s+"
    r"(?:rank (\d+)|this local rank)"
)


def owner(first: Event | None, events: list[Event], scan: Scan) -> Event | None:
    """The rank the first failure belongs to: `with_rank`, then, when that failure is only a
    timeout, the rank whose watchdog timed out first as the dump request names it."""
    first = with_rank(first, events, scan)
    if first is None or not first.echo:
        return first
    for event in events:
        found = _DUMP_FROM.search(event.text)
        if found is None:
            continue
        if found.group(1) is None:
            rank = event.rank
        elif "(default_pg)" in found.group(0):
            rank = int(found.group(1))
        else:
            continue
        if rank is not None and rank != first.rank:
            return _replace_rank(first, rank)
        return first
    return first


def summary_root_cause(first: Event | None, real: list[Event], scan: Scan) -> Event | None:
    """When the launcher's reports are all the log has of the failure, torchrun's summary says which
    worker failed first (`Root Cause (first observed failure)`), though it lists the others above it."""
    if first is None or not is_launcher(first) or scan.root_cause_rank in (None, first.rank):
        return first
    reports = [e for e in real if e.rank == scan.root_cause_rank and is_launcher(e)]
    same = [e for e in reports if e.kind == first.kind and e.entry_id == first.entry_id]
    return (same or reports or [first])[0]


def spawn_peer(first: Event | None, scan: Scan) -> int | None:
    """The process that died first when mp.spawn reported the survivor instead: mp.spawn prints the
    traceback of the first process it finds dead, and when the survivor lost its peer at the same
    moment (`Connection closed by peer`) that may be the survivor's, an echo. With two processes,
    the other one still there for mp.spawn to stop (it was dying: a process that had ended well
    would be gone) and no higher rank anywhere, the other one failed. A timeout is no such echo:
    the rank that gave up waiting is the first to report."""
    if first is None or not first.echo or first.rank not in (0, 1) or first.rank != scan.spawn_failed:
        return None
    if not peer_gone(first.text) or scan.spawn_stopped != 1 or any(rank > 1 for rank in scan.ranks_seen):
        return None
    return 1 - first.rank


def _replace_rank(event: Event, rank: int) -> Event:
    return dataclasses.replace(event, rank=rank)


def rank_roles(events: list[Event], first: Event | None) -> tuple[list[int], list[int]]:
    """(ranks that only waited for the first failure, ranks suspected of not arriving)."""
    if first is None:
        return [], []
    own: dict[int, bool] = {}  # rank -> has a real failure of its own
    stopped: set[int] = set()
    for event in events:
        if event.rank is None:
            continue
        if event.kind == "exit" and ((event.exit_code == SIGTERM_EXIT and not event.real) or event.echo):
            stopped.add(event.rank)
            own.setdefault(event.rank, False)
            continue
        mine = event.real and not is_launcher(event) and not is_context(event)
        own[event.rank] = own.get(event.rank, False) or mine
    others = sorted(r for r, mine in own.items() if not mine and r != first.rank)
    if first.echo:
        # The first rank timed out waiting: the ranks that never reported an error of their own
        # (stopped by the launcher, or silent) are the ones it waited for.
        quiet = {e.rank for e in events if e.rank is not None and not is_launcher(e)}
        suspects = sorted(r for r in stopped if r not in quiet and r != first.rank)
        waiting = sorted(r for r in others if r not in suspects)
        return waiting, suspects
    return others, []
