"""Events in time order, across ranks and files: by timestamp when every source has some, else by
position (the launcher's console after the per-rank files it reports on)."""

from __future__ import annotations

from triage.core.logscan.rules import is_launcher
from triage.core.logscan.scanner import Event, Scan


def order_events(scan: Scan) -> tuple[list[Event], str]:
    """Events in time order. Lines without a timestamp take the next stamped line's in their
    source (a traceback is printed just before the launcher's stamped report of it)."""
    by_source: dict[int, list[Event]] = {}
    for event in scan.events:
        by_source.setdefault(event.source, []).append(event)
    timed = all(any(e.time is not None for e in events) for events in by_source.values())
    if not timed or not scan.events:
        # The launcher's console (one source) reports what the per-rank files (the others)
        # show happening: with no clock to go by, its reports come after the workers' lines.
        several = len(by_source) > 1
        return sorted(scan.events, key=lambda e: (several and is_launcher(e), e.source, e.line)), "position"
    keyed: list[tuple[float, int, int, Event]] = []
    for source, events in by_source.items():
        events.sort(key=lambda e: e.line)
        upcoming: float | None = None
        filled: list[float] = []
        for event in reversed(events):
            if event.time is not None:
                upcoming = event.time
            filled.append(upcoming if upcoming is not None else float("inf"))
        filled.reverse()
        last: float | None = None  # lines after the last stamp keep the last stamp seen
        for index, event in enumerate(events):
            if event.time is not None:
                last = event.time
            when = filled[index]
            if when == float("inf") and last is not None:
                when = last
            keyed.append((when, source, event.line, event))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed], "time"
