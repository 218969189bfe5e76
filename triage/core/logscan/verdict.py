"""From events to a verdict: the first real failure, the ranks that only waited, ranked diagnoses.

The rules, in the order a person reading eight ranks of output would apply them:

1. Put the events in time order: by timestamp when every source has some, else by position.
2. The first *real* failure is the earliest event that is a rank's own failure: a non-echo
   signature hit, an exception no signature explains, or a worker exit the rank printed nothing
   about. Echoes (watchdog timeouts, "Connection closed by peer", torchrun's summary) only count
   when there is nothing else.
3. Ranks whose only events are echoes, or that the launcher stopped with SIGTERM, were waiting.
   When the first failure is itself a timeout, the ranks that reported nothing are the suspects.
4. Diagnoses are scored from the signature weights; echo hits count for half, and the entry that
   explains the first failure gets a bonus. When the first failure is an exception the knowledge
   does not explain and other ranks only waited, that pattern is itself a diagnosis:
   DIVERGED_RANK (fix the rank that failed, not the hang).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.core.logscan.scanner import SIGTERM_EXIT as SIGTERM
from triage.core.logscan.scanner import SUBSTANTIVE_WEIGHT, Event, Scan
from triage.core.model import KnowledgeBase

# The entry that explains "one rank failed with its own error and the others waited for it". The
# scan concludes it from a pattern across ranks, not from a line a signature could match.
DIVERGED_RANK = "D20"

ECHO_FACTOR = 0.5
FIRST_BONUS = 0.25
SPREAD_BONUS = 0.03  # per extra rank or line showing the same entry, capped
SPREAD_CAP = 0.1
DIVERGED_SCORE = 0.85
THRESHOLD = 0.4  # below it a diagnosis is only "closest", not a finding
MAX_EVIDENCE = 6


@dataclass(frozen=True)
class Diagnosis:
    entry_id: str
    score: float
    evidence: tuple[Event, ...]
    reason: str  # one line: why this entry, in the scan's terms
    explains_first: bool = False


@dataclass
class Verdict:
    found: bool
    diagnoses: list[Diagnosis]
    first: Event | None  # the first real failure (or first echo when nothing else)
    first_rank: int | None
    waiting_ranks: list[int] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)  # silent while others timed out
    ordered_by: str = "position"  # "time" when timestamps ordered the events
    root_cause_rank: int | None = None  # what torchrun's summary claimed


def order_events(scan: Scan) -> tuple[list[Event], str]:
    """Events in time order. Lines without a timestamp take the next stamped line's in their
    source (a traceback is printed just before the launcher's stamped report of it)."""
    by_source: dict[int, list[Event]] = {}
    for event in scan.events:
        by_source.setdefault(event.source, []).append(event)
    timed = all(any(e.time is not None for e in events) for events in by_source.values())
    if not timed or not scan.events:
        return sorted(scan.events, key=lambda e: (e.source, e.line)), "position"
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
        # lines after the last stamp keep the last stamp seen
        last: float | None = None
        for index, event in enumerate(events):
            if event.time is not None:
                last = event.time
            when = filled[index]
            if when == float("inf") and last is not None:
                when = last
            keyed.append((when, source, event.line, event))
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed], "time"


def decide(scan: Scan, kb: KnowledgeBase) -> Verdict:
    """The verdict for one scan."""
    events, ordered_by = order_events(scan)
    # An exit is a rank's own failure only when the rank printed nothing about it.
    own_lines = {e.rank for e in events if e.kind != "exit" and e.rank is not None}

    def substantive(event: Event) -> bool:
        if event.kind == "exit":
            return event.real and event.rank not in own_lines
        if event.kind == "hit":
            return not event.echo and event.weight >= SUBSTANTIVE_WEIGHT
        return True

    real = [e for e in events if substantive(e)]
    echoes = [e for e in events if e.kind == "hit" and e.echo]
    hints = [e for e in events if e.kind == "hit" and not e.echo]
    # With only echoes, the first one that names its rank says who was waiting.
    ranked_echoes = [e for e in echoes if e.rank is not None] or echoes
    first = real[0] if real else (ranked_echoes[0] if echoes else (hints[0] if hints else None))
    first_rank = first.rank if first else None

    waiting, suspects = _rank_roles(events, first)
    # Echoes only step back when a rank's own failure is there to take the lead.
    diagnoses = _score(events, first, kb, ECHO_FACTOR if real else 1.0)
    if first is not None and first.kind in ("exception", "exit") and (waiting or echoes):
        diverged = kb.entry(DIVERGED_RANK)
        if diverged is not None:
            support = [first, *[e for e in echoes if e.rank != first.rank][: MAX_EVIDENCE - 1]]
            who = f"rank {first.rank}" if first.rank is not None else "one process"
            diagnoses.append(
                Diagnosis(
                    diverged.id,
                    DIVERGED_SCORE,
                    tuple(support),
                    f"{who} failed first with an error of its own; the other ranks only waited",
                    explains_first=True,
                )
            )
            diagnoses = _merge(diagnoses)
    diagnoses.sort(key=lambda d: (-d.score, d.entry_id))
    found = bool(diagnoses) and diagnoses[0].score >= THRESHOLD
    return Verdict(
        found=found,
        diagnoses=diagnoses,
        first=first,
        first_rank=first_rank,
        waiting_ranks=waiting,
        suspect_ranks=suspects,
        ordered_by=ordered_by,
        root_cause_rank=scan.root_cause_rank,
    )


def _rank_roles(events: list[Event], first: Event | None) -> tuple[list[int], list[int]]:
    """(ranks that only waited for the first failure, ranks suspected of not arriving)."""
    if first is None:
        return [], []
    own: dict[int, bool] = {}  # rank -> has a real failure of its own
    stopped: set[int] = set()
    for event in events:
        if event.rank is None:
            continue
        if event.kind == "exit" and event.exit_code == SIGTERM:
            stopped.add(event.rank)
            own.setdefault(event.rank, False)
            continue
        real = event.real and event.kind != "exit"
        own[event.rank] = own.get(event.rank, False) or real
    others = sorted(r for r, mine in own.items() if not mine and r != first.rank)
    first_is_echo = first.kind == "hit" and first.echo
    if first_is_echo:
        # The first rank timed out waiting: the ranks that never reported an error of their own
        # (stopped by the launcher, or silent) are the ones it waited for.
        quiet = {e.rank for e in events if e.rank is not None and e.kind != "exit"}
        suspects = sorted(r for r in stopped if r not in quiet and r != first.rank)
        waiting = sorted(r for r in others if r not in suspects)
        return waiting, suspects
    return others, []


def _score(
    events: list[Event], first: Event | None, kb: KnowledgeBase, echo_factor: float
) -> list[Diagnosis]:
    grouped: dict[str, list[Event]] = {}
    for event in events:
        if event.kind == "hit" and event.entry_id in kb.entries:
            grouped.setdefault(event.entry_id, []).append(event)
    result = []
    for entry_id, hits in grouped.items():
        best = max(e.weight * (echo_factor if e.echo else 1.0) for e in hits)
        places = {(e.rank, e.line, e.source) for e in hits}
        spread = min(SPREAD_CAP, SPREAD_BONUS * (len(places) - 1))
        explains_first = first is not None and any(
            e.source == first.source and e.line == first.line for e in hits
        )
        bonus = FIRST_BONUS if explains_first and first is not None else 0.0
        if first_is_echo(first) or (
            first is not None and first.kind == "hit" and first.weight < SUBSTANTIVE_WEIGHT
        ):
            bonus /= 2
        score = best + spread + bonus
        all_echo = all(e.echo for e in hits)
        reason = (
            "only lines that usually echo another rank's failure"
            if all_echo
            else ("the first failure in the log" if explains_first else "a signature of this failure")
        )
        evidence = _pick_evidence(hits)
        result.append(Diagnosis(entry_id, round(score, 3), evidence, reason, explains_first))
    return result


def first_is_echo(event: Event | None) -> bool:
    return event is not None and event.kind == "hit" and event.echo


def _pick_evidence(hits: list[Event]) -> tuple[Event, ...]:
    """Strongest lines first, one per rank before repeats, in time order within a weight."""
    chosen: list[Event] = []
    seen_ranks: set[int | None] = set()
    seen_lines: set[tuple[int, int]] = set()
    ordered = sorted(hits, key=lambda e: (e.echo, -e.weight))
    for repeat in (False, True):
        for event in ordered:
            if len(chosen) == MAX_EVIDENCE:
                return tuple(chosen)
            place = (event.source, event.line)
            if place in seen_lines or (not repeat and event.rank in seen_ranks):
                continue
            chosen.append(event)
            seen_lines.add(place)
            seen_ranks.add(event.rank)
    return tuple(chosen)


def _merge(diagnoses: list[Diagnosis]) -> list[Diagnosis]:
    """One diagnosis per entry: the higher score, evidence of both."""
    merged: dict[str, Diagnosis] = {}
    for diagnosis in diagnoses:
        other = merged.get(diagnosis.entry_id)
        if other is None:
            merged[diagnosis.entry_id] = diagnosis
            continue
        high, low = (diagnosis, other) if diagnosis.score >= other.score else (other, diagnosis)
        places = {(e.source, e.line) for e in high.evidence}
        evidence = list(high.evidence) + [e for e in low.evidence if (e.source, e.line) not in places]
        merged[diagnosis.entry_id] = Diagnosis(
            high.entry_id,
            high.score,
            tuple(evidence[:MAX_EVIDENCE]),
            high.reason,
            high.explains_first or low.explains_first,
        )
    return list(merged.values())
