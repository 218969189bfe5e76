"""A log's diagnosis in words, for `triage log` and the report: the summary, the evidence, the ranks.

One rendering for both, so the report says exactly what `triage log` says. The evidence shown for
a diagnosis is each log line once (a line several signatures match is still one line), and never
the launcher's bare failure summary (`error_file: <N/A>`, `ChildFailedError`, `Root Cause (first
observed failure)`) nor another entry's echo without a rank: those say a worker failed, not which
one or why.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from triage.core.logscan.ordering import order_events
from triage.core.logscan.rules import is_launcher
from triage.core.logscan.scanner import Event, Scan
from triage.core.logscan.structure import SIGTERM_EXIT
from triage.core.logscan.verdict import Diagnosis, Verdict
from triage.render.ranks import RankRow, rank_ranges


def shown_score(score: float) -> float:
    """Scores on the 0-1 scale `ask` uses: the bonuses for spread and for explaining the first
    failure order the diagnoses, but a score never reads as more than certain."""
    return round(min(1.0, max(0.0, score)), 2)


def plural(count: int, word: str) -> str:
    """`count word`, with the word in the plural unless the count is 1."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def where(scan: Scan, event: Event) -> str:
    """`file:line` of an event."""
    return f"{scan.sources[event.source]}:{event.line}"


def rank_text(rank: int | None) -> str:
    """`rank N`, or what to say when the line has no rank."""
    return f"rank {rank}" if rank is not None else "no rank prefix"


def summary_lines(scan: Scan, verdict: Verdict) -> list[str]:
    """The scan's summary: files, ranks, and how events were ordered."""
    ranks = len(scan.ranks_seen)
    order = "timestamps" if verdict.ordered_by == "time" else "position in the log"
    lines = [
        f"Scanned {plural(len(scan.sources), 'file')}, {plural(scan.lines, 'line')}: "
        f"{plural(scan.hit_lines, 'line')} with a known signature, from {plural(ranks, 'rank')} "
        f"(events ordered by {order})."
    ]
    first = verdict.first
    if first is None:
        return lines
    what = "first failure" if first.real else "first error (it only echoes a wait)"
    lines.append(f"The {what}: {rank_text(first.rank)}, {where(scan, first)}")
    lines.append(f"    {first.text}")
    if verdict.waiting_ranks:
        lines.append(f"Ranks that only waited for it: {_ranks(verdict.waiting_ranks)}.")
    if verdict.first_rank_reason:
        lines.append(f"Rank {verdict.first_rank} failed first: {verdict.first_rank_reason}.")
    elif verdict.suspect_ranks:
        lines.append(
            "Ranks that reported no error while the others waited (the likely stragglers): "
            f"{_ranks(verdict.suspect_ranks)}."
        )
    claimed = verdict.root_cause_rank
    if claimed is not None and claimed in (*verdict.waiting_ranks, *verdict.suspect_ranks):
        lines.append(
            f"torchrun's 'Root Cause (first observed failure)' names rank {claimed}: that is the"
            " first process it saw exit, not the first to fail."
        )
    return lines


def _ranks(ranks: Sequence[int]) -> str:
    """`1-7, 9` rather than every number: a job of 4,096 ranks fits on a line."""
    return rank_ranges(ranks).replace(",", ", ")


def evidence(diagnosis: Diagnosis) -> list[Event]:
    """The lines shown for a diagnosis: each once, the launcher's generic summary left out."""
    shown: list[Event] = []
    seen: set[tuple[int, int]] = set()
    for event in diagnosis.evidence:
        place = (event.source, event.line)
        if place in seen:
            continue
        if _launcher_summary(event, diagnosis.entry_id):
            continue
        seen.add(place)
        shown.append(event)
    return shown or list(diagnosis.evidence[:1])


# torchrun's failure summary: it says that a worker failed, never which one failed first or why.
LAUNCHER_BOILERPLATE = re.compile(
    r"error_file:\s*<N/A>|Root Cause \(first observed failure\)|ChildFailedError|To enable traceback see",
    re.IGNORECASE,
)


def _launcher_summary(event: Event, entry_id: str) -> bool:
    if event.kind != "hit" or not event.echo:
        return False
    if LAUNCHER_BOILERPLATE.search(event.text):
        return True  # even when the summary block is filed under the rank it describes
    return event.rank is None and event.entry_id != entry_id


def evidence_line(scan: Scan, event: Event, indent: str = "    ") -> str:
    """One evidence line: where it was, and the text (shortened)."""
    tag = " (echo)" if event.echo else (" (context)" if event.role in ("frame", "umbrella", "info") else "")
    text = event.text if len(event.text) <= 160 else event.text[:157] + "..."
    return f"{indent}{where(scan, event)}  [{rank_text(event.rank)}]{tag}  {text}"


# -- the ranks at a glance ----------------------------------------------------------------------


def clock(seconds: float) -> str:
    """The time of day of a scan timestamp (seconds into an imaginary year)."""
    day = seconds % 86400
    return f"{int(day // 3600):02d}:{int(day % 3600 // 60):02d}:{day % 60:05.2f}"


def rank_rows(scan: Scan, verdict: Verdict) -> list[RankRow]:
    """One row per rank that printed anything the scan kept: its own failure if it had one, else
    the last thing it printed; the first failure, the waiting ranks and the silent ones marked."""
    events, _ = order_events(scan)
    by_rank: dict[int, list[Event]] = {}
    for event in events:
        if event.rank is not None:
            by_rank.setdefault(event.rank, []).append(event)
    many = len(scan.sources) > 1
    rows: list[RankRow] = []
    for rank in sorted(set(by_rank) | set(verdict.suspect_ranks)):
        mine = by_rank.get(rank, [])
        # the launcher's report about a rank (its exit, its summary block) is not the rank's own output
        printed = [e for e in mine if not is_launcher(e)]
        # An exit code is a rank's own failure only when the rank printed nothing about it.
        own = [e for e in printed if e.real] if printed else [e for e in mine if e.real]
        first = verdict.first
        shown: Event | None
        if first is not None and rank == first.rank:
            state, shown = ("first" if first.real else "timeout"), first
        elif own:
            state, shown = "failed", own[0]
        else:
            shown = printed[-1] if printed else (mine[-1] if mine else None)
            if rank in verdict.suspect_ranks:
                state = "suspect"
            elif not printed and mine:
                state = "stopped"
            else:
                state = "waiting"
        if shown is None:
            rows.append(RankRow(rank, state, "(printed nothing the scan recognised)"))
            continue
        text = _last_text(shown)
        if shown.kind != "exit" and any(
            e.kind == "exit" and e.exit_code == SIGTERM_EXIT and not e.real for e in mine
        ):
            text += "  (then stopped by the launcher)"
        rows.append(RankRow(rank, state, text, _when(scan, shown, many)))
    return rows


def _last_text(event: Event) -> str:
    if event.kind == "exit":
        return f"exited with code {event.exit_code}" + (
            (" (SIGTERM from outside the launcher)" if event.real else " (SIGTERM from the launcher)")
            if event.exit_code == SIGTERM_EXIT
            else ""
        )
    return event.text


def _when(scan: Scan, event: Event, many: bool) -> str:
    if event.time is not None:
        return clock(event.time)
    name = os.path.basename(scan.sources[event.source]) if many else ""
    return f"{name}:{event.line}" if name else f"line {event.line}"
