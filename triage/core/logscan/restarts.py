"""torchrun restarting the worker group (`--max-restarts`): one event, the restart (MN5).

torchrun says so at INFO level (`Worker group FAILED. 1/1 attempts left; will restart worker
group`, a signature of MN5). At its default level it says nothing, but the log still shows it:
- the launcher reports a failed worker once per attempt, so a second report from the same launcher
  about another worker process means the group was started again (structure.Structure.restarted);
- a launcher that gives up prints its ChildFailedError summary right after its report; when the
  workers' own output goes on after the report instead, and no summary follows, the group was
  started again (and may well have ended "successfully", from step 0).
What the restarted workers print after the report (a rendezvous or a connection that fails, the
same error again) follows from the first attempt's failure, the one that counts.
"""

from __future__ import annotations

import dataclasses
import re

from triage.core.logscan.heads import EXCEPTION_NAME
from triage.core.logscan.rules import RESTART, Inferred
from triage.core.logscan.scanner import Event, Scan

# Over a diverged rank (rules.DIVERGED_SCORE) and the first failure's own echoes: the restart is
# what the log is about, and its fix (reload state at start-up) holds whatever failed first.
RESTART_SCORE = 1.2
_REPORT = re.compile(r"elastic/multiprocessing/api\.py:\d+\] failed \(exitcode: -?\d+\) local_rank: \d+")
# The launcher giving up: its summary, or its own traceback (through torchrun's entry point).
_GAVE_UP = re.compile(
    r"ChildFailedError|Root Cause \(first observed failure\)|^\S+ FAILED\s*$"
    r"|bin/torchrun\b|torch/distributed/run\.py|\blaunch_agent\b"
)
# Lines after the report that are not the workers' own output (read without the launcher's
# `[default0]:` / `[rank0]:` prefixes, their indentation kept): the launcher's log lines, the
# tracebacks of the workers it is stopping or its own (frames and code are indented, the exception
# ends them), blank lines.
_LAUNCHER_PREFIX = re.compile(r"^(?:\[(?:default|rank)\d+\]:)+")
_NOT_OUTPUT = re.compile(r"^\s*$|^\s|^\[?[IWEF]\d{4} |^Traceback \(most recent|^" + EXCEPTION_NAME)
MIN_OUTPUT_AFTER = 2  # lines of the workers' own output after the report before it counts as resumed


def restart_point(scan: Scan) -> tuple[int, int, int | None] | None:
    """(source, the launcher's first failure report, the next report or None): where the log shows
    the worker group started again."""
    if scan.restarted is not None:
        return scan.restarted
    for source, head in enumerate(scan.heads):
        lines = head.split("\n")
        report = next((n for n, line in enumerate(lines) if _REPORT.search(line)), None)
        if report is None or any(_GAVE_UP.search(line) for line in lines[report:]):
            continue
        tail = lines[report + 1 : -1]  # the head's last line may be cut
        output = [line for line in tail if not _NOT_OUTPUT.search(_LAUNCHER_PREFIX.sub("", line))]
        if len(output) >= MIN_OUTPUT_AFTER:
            return (source, report + 1, None)
    return None


def after_restart(events: list[Event], scan: Scan) -> list[Event]:
    """The events, those printed after the launcher's first failure report marked as echoes when
    the launcher then started the workers again."""
    point = restart_point(scan)
    if point is None:
        return events
    source, first_report, _ = point
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
    point = restart_point(scan)
    if point is None:
        return None
    source, first_report, again = point
    if (first.source, first.line) > (source, first_report):
        return None
    report = [e for e in events if e.source == source and e.line == (again or first_report)]
    how = (
        "reported one again"
        if again is not None
        else "the workers' output went on after the report with no failure summary"
    )
    return Inferred(
        RESTART,
        RESTART_SCORE,
        (first, *report[:1]),
        f"torchrun reported a failed worker, started the group again (--max-restarts), and {how}:"
        " the restarted workers began from the top of the script",
        True,
    )
