"""Signals from outside the job: a worker killed by one, and a job interrupted by hand.

torchrun stops the surviving workers with SIGTERM once one has failed, and says so for each
(`Sending process 953 closing signal SIGTERM`). A worker whose exit report says SIGTERM (exit code
-15) while the launcher, seen stopping other workers, never sent that worker's pid one, was ended
from outside the job: a person's `kill`, a scheduler, a cleanup job, a preemption notice. So was a
process mp.spawn reports dead of SIGTERM (it reports the first to die, never one it stopped). The other
ranks' lost peer only follows from it (X3, with the spot-preemption entry X2 beside it).

A job interrupted by hand (Ctrl+C: torchrun's `SignalException: ... got signal: 2`, the workers'
`KeyboardInterrupt`) with no error of its own before the interrupt was almost always hung: what
the log can say is where each rank stood, and the desync toolkit (D19) names the rank and the
collective that never completed (ranks in different collectives are the mismatch rule's D21).
"""

from __future__ import annotations

import re

from triage.core.logscan.rules import DESYNC_TOOLKIT, Inferred, is_context, is_launcher
from triage.core.logscan.scanner import Event, Scan
from triage.core.logscan.structure import OUTSIDE_SIGTERM

KILLED_FROM_OUTSIDE = "X3"
# Over a diverged rank (rules.DIVERGED_SCORE): the other ranks' errors echo this worker's end.
OUTSIDE_SCORE = 0.95
# Over the lost peers' echoes the interrupt leaves behind; under the mismatch rule's D21.
INTERRUPTED_SCORE = 0.9
_INTERRUPT = re.compile(r"\bKeyboardInterrupt\b|got signal: 2\b|Received (?:2|Signals\.SIGINT) death signal")


def killed_from_outside(events: list[Event]) -> Inferred | None:
    """The first worker the launcher reports ended by a SIGTERM it did not send itself."""
    for event in events:
        if event.kind == "exit" and event.note == OUTSIDE_SIGTERM and event.rank is not None:
            reason = (
                f"rank {event.rank} died of a SIGTERM its launcher did not send: something outside the"
                " job stopped it (a kill, a scheduler, a cleanup job, a preemption); the other ranks"
                " only lost their peer"
            )
            return Inferred(KILLED_FROM_OUTSIDE, OUTSIDE_SCORE, (event,), reason, True)
    return None


def interrupted(events: list[Event], scan: Scan) -> Inferred | None:
    """A job stopped by Ctrl+C that printed no error of its own before it: it was hung."""
    stops = [e for e in events if e.kind in ("exception", "hit") and _INTERRUPT.search(e.text)]
    if not stops:
        return None
    own = (e for e in events if e.real and e.kind != "exit" and not is_launcher(e) and not is_context(e))
    if any(not _INTERRUPT.search(e.text) for e in own):
        return None  # an error of its own: the interrupt came after the failure
    waits = sorted(scan.ranks.waits.values(), key=lambda w: w.rank)
    where = "; ".join(
        f"rank {w.rank} in {w.collective}" + (f" ({w.where})" if w.where else "") for w in waits[:8]
    )
    reason = (
        "the job was interrupted by hand (Ctrl+C) with no error of its own before it: it was hung"
        + (f"; when interrupted, {where}" if where else "")
        + ". Name the rank and the collective that never completed before interrupting it"
    )
    return Inferred(DESYNC_TOOLKIT, INTERRUPTED_SCORE, tuple(stops[:3]), reason, True)
