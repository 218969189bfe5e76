"""Findings: which knowledge entries the probe facts point at.

Pure: facts and the knowledge base in, findings out. Each entry's `confirm:` list names facts and
the values that support it; a finding is an entry with at least one of those facts at one of those
values. The CLI and the TUI both render these, so neither holds any diagnosis logic of its own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from triage.core.model import KnowledgeBase
from triage.core.walker import fact_text


@dataclass(frozen=True)
class FactMatch:
    """One confirm item that the facts satisfy."""

    fact: str
    value: str
    note: str = ""


@dataclass(frozen=True)
class Finding:
    """An entry the facts support, and which of its confirm items they satisfy."""

    entry_id: str
    title: str
    kind: str
    matches: tuple[FactMatch, ...]
    confirm_total: int

    @property
    def text(self) -> str:
        """One line: what was seen, and where to read: 'NCCL_SOCKET_IFNAME ...: see MN2'."""
        seen = "; ".join(m.note or f"{m.fact}={m.value}" for m in self.matches)
        return f"{seen}: see {self.entry_id}"


def value_matches(value: object, accepted: tuple[str, ...]) -> str | None:
    """The text of `value` when it is one of `accepted` (a list matches on any element), else None."""
    wanted = {v.lower() for v in accepted}
    if isinstance(value, list | tuple | set | frozenset):
        for item in value:
            text = fact_text(item)
            if text in wanted:
                return text
        return None
    text = fact_text(value)
    return text if text in wanted else None


def findings(
    facts: Mapping[str, object], kb: KnowledgeBase, flagged: Collection[str] | None = None
) -> list[Finding]:
    """Entries supported by the facts: most matched confirm items first, then the larger share of
    the entry's confirm list, then knowledge order.

    `flagged` names the facts the probes marked abnormal (ProbeResult.flagged). When given, only
    entries with at least one flagged match are findings: many confirm items describe context
    (a bare python, a passing mini-test) that fits an entry without pointing at it."""
    found: list[tuple[int, Finding]] = []
    for order, entry in enumerate(kb.entries.values()):
        matches = []
        for confirm in entry.confirm:
            if confirm.fact not in facts:
                continue
            text = value_matches(facts[confirm.fact], confirm.values)
            if text is not None:
                matches.append(FactMatch(confirm.fact, text, confirm.note))
        if flagged is not None:
            if not any(m.fact in flagged for m in matches):
                continue
            matches.sort(key=lambda m: m.fact not in flagged)  # what was wrong first, then context
        if matches:
            found.append(
                (order, Finding(entry.id, entry.title, entry.kind, tuple(matches), len(entry.confirm)))
            )
    found.sort(
        key=lambda item: (-len(item[1].matches), -len(item[1].matches) / item[1].confirm_total, item[0])
    )
    return [finding for _, finding in found]
