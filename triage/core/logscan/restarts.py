"""torchrun restarting the worker group (`--max-restarts`): one event, the restart (MN5).

torchrun says so at INFO level (`Worker group FAILED. 1/1 attempts left; will restart worker
group`, a signature of MN5). At its default level it says nothing, but the log still shows it: the
launcher reports a failed worker once per attempt, so a second report from the same launcher about
another worker process means the group was started again (structure.Structure.restarted). What
the restarted workers print after that (a rendezvous or a connection that fails, the same error
again) follows from the first attempt's failure, the one that counts.
"""

from __future__ import annotations

import dataclasses

from triage.core.logscan.rules import RESTART, Inferred
from triage.core.logscan.scanner import Event, Scan

# Over a diverged rank (rules.DIVERGED_SCORE) and the first failure's own echoes: the restart is
# what the log is about, and its fix (reload state at start-up) holds whatever failed first.
RESTART_SCORE = 1.2


def after_restart(events: list[Event], scan: Scan) -> list[Event]:
    """The events, those printed after the launcher's first failure report marked as echoes when
    the launcher then started the workers again."""
    if scan.restarted is None:
        return events
    source, first_report, _ = scan.restarted
    return [
        dataclasses.replace(e, echo=True) if e.source == source and e.line > first_report else e
        for e in events
    ]


def restart(events: list[Event], first: Event | None, scan: Scan) -> Inferred | None:
    """The restart, when the log shows one after the first failure."""
    if first is None:
        return None
    announced = [e for e in events if e.kind == "hit" and e.entry_id == RESTART and not e.echo]
    if (
        announced
        and first.kind == "exit"
        and (first.source, first.line) <= (announced[0].source, announced[0].line)
    ):
        return Inferred(
            RESTART, 0.0, (first, announced[0]), "a worker died and torchrun restarted the group", True
        )
    if scan.restarted is None:
        return None
    source, _, again = scan.restarted
    if (first.source, first.line) > (source, again):
        return None
    report = [e for e in events if e.source == source and e.line == again]
    return Inferred(
        RESTART,
        RESTART_SCORE,
        (first, *report[:1]),
        "torchrun reported a failed worker, started the group again (--max-restarts), and reported"
        " one again: the restarted workers began from the top of the script",
        True,
    )
