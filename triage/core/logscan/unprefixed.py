"""Whose error is it, when it has no rank prefix?

torch puts `[rankN]:` in front of the traceback of an exception that ends a rank's main thread, but
not in front of what a rank prints another way: an exception in a background thread (`Exception in
thread Thread-1`), a traceback printed by a logging call, a warning. When every rank that printed
prefixed lines printed only waits (a timeout, a lost peer: echoes), none of them failed on its own,
so the bare error is not theirs; if exactly one of the ranks the log knows printed nothing of its
own at all, the bare error is that rank's (a prefetch thread died on rank 1 while rank 0 timed out
waiting for it; torchrun's summary, which names rank 0 as its root cause, saw only who exited first).
"""

from __future__ import annotations

from triage.core.logscan.rules import is_context, is_launcher
from triage.core.logscan.scanner import Event


def bare_owner(first: Event, events: list[Event], ranks_seen: set[int]) -> int | None:
    """The rank a first failure printed without a rank prefix belongs to, or None when the log
    cannot tell (some rank failed on its own, or more than one rank is silent)."""
    if first.rank is not None or first.echo or first.kind == "exit" or is_launcher(first):
        return None
    own: dict[int, bool] = {}  # rank -> printed an error of its own, not only waits
    for event in events:
        if event.rank is None or event.kind == "exit" or is_launcher(event) or is_context(event):
            continue
        own[event.rank] = own.get(event.rank, False) or event.real
    if not own or any(own.values()):
        return None
    silent = sorted(ranks_seen - set(own))
    return silent[0] if len(silent) == 1 else None
