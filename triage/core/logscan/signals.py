"""A worker ended by a signal nobody in the job sent: the cause is outside the training code.

torchrun stops the surviving workers with SIGTERM once one has failed, and says so for each
(`Sending process 953 closing signal SIGTERM`). A worker whose exit report says SIGTERM (exit code
-15) while the launcher, seen stopping other workers, never sent that worker's pid one, was ended
from outside the job: a person's `kill`, a scheduler, a cleanup job, a preemption notice. The other
ranks' lost peer only follows from it (X3, with the spot-preemption entry X2 beside it).
"""

from __future__ import annotations

from triage.core.logscan.rules import Inferred
from triage.core.logscan.scanner import Event
from triage.core.logscan.structure import OUTSIDE_SIGTERM

KILLED_FROM_OUTSIDE = "X3"
# Over a diverged rank (rules.DIVERGED_SCORE): the other ranks' errors echo this worker's end.
OUTSIDE_SCORE = 0.95


def killed_from_outside(events: list[Event]) -> Inferred | None:
    """The first worker the launcher reports ended by a SIGTERM it did not send itself."""
    for event in events:
        if event.kind == "exit" and event.note == OUTSIDE_SIGTERM and event.rank is not None:
            reason = (
                f"rank {event.rank} died of SIGTERM that torchrun did not send (it sent SIGTERM only to"
                " the other workers): something outside the job stopped it (a kill, a scheduler,"
                " a cleanup job, a preemption); the other ranks only lost their peer"
            )
            return Inferred(KILLED_FROM_OUTSIDE, OUTSIDE_SCORE, (event,), reason, True)
    return None
