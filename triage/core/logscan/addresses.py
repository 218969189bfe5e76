"""c10d's "failed to connect to any network address of (host, port)": a name or a route?

c10d prints that line when it reached none of the addresses a `(host, port)` resolved to; the
per-address lines before it (`failed to connect to [::ffff:10.0.0.5]:29500 (errno: 101 - Network
is unreachable)`) say where it knocked. When the host asked for is a literal IPv4 address and c10d
knocked on that same address, no name was resolved (or resolved wrong): the summary line only
repeats the per-address failure, whose errno is the cause (a route, a firewall, nobody listening).
When the per-address lines name something else (a reverse-resolved name, a number read as an
integer address), the summary stays: the name is the story.
"""

from __future__ import annotations

import dataclasses
import re

from triage.core.logscan.scanner import Event

_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}"
_SUMMARY = re.compile(rf"failed to connect to any network address of \((?P<host>{_IPV4}), (?P<port>\d+)\)")
_KNOCKED = re.compile(rf"failed to connect to \[?(?:::ffff:)?(?P<host>{_IPV4})\]?:(?P<port>\d+) \(errno: \d+")


def _address(found: re.Match[str]) -> tuple[str, str]:
    return found["host"], found["port"]


def reached_addresses(events: list[Event]) -> list[Event]:
    """The summary lines for a literal IP that c10d knocked on itself become echoes of the
    per-address failures (which keep their own signature)."""
    knocked = {
        _address(found)
        for event in events
        if event.kind == "hit" and (found := _KNOCKED.search(event.text)) is not None
    }
    if not knocked:
        return events
    result = []
    for event in events:
        found = _SUMMARY.search(event.text) if event.kind == "hit" else None
        if found is not None and _address(found) in knocked and not _KNOCKED.search(event.text):
            event = dataclasses.replace(event, echo=True)
        result.append(event)
    return result
