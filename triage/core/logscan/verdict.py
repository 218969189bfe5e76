"""From events to a verdict: the first real failure, the ranks that only waited, ranked diagnoses.

The steps, in the order a person reading eight ranks of output would take them:

1. Put the events in time order: by timestamp when every source has some, else by position.
2. Apply the consequence rules (rules.py): what follows a rank's timeout is part of it, an abort
   after an error echoes it, NCCL's umbrella errors give way to the line that names the cause,
   traceback frames are context.
3. The first *real* failure is the earliest event that is a rank's own failure: a substantive
   signature hit, an error no signature explains, or a worker exit the rank printed nothing about.
   Echoes (watchdog timeouts, "Connection closed by peer", torchrun's summary) only count when
   there is nothing else.
4. Ranks whose only events are echoes, or that the launcher stopped with SIGTERM, were waiting.
   When the first failure is itself a timeout, the ranks that reported nothing are the suspects.
5. Diagnoses are scored from the signature weights (echo hits count for half when a real failure
   is there; the entry that explains the first failure gets a bonus), joined by the diagnoses
   that come from patterns across ranks (rules.inferred).
6. When nothing reaches the threshold, the query engine reads the errors the scan found (and the
   start of the log) as a user's description, and its answer is given as a weaker diagnosis.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from triage.core.logscan.first_rank import owner, rank_roles, spawn_peer, summary_root_cause
from triage.core.logscan.heads import INTERLEAVED
from triage.core.logscan.ordering import order_events
from triage.core.logscan.query_reading import (
    LOG_THRESHOLD,
    clear_lead,
    fallback_text,
    in_domain,
    own_text,
)
from triage.core.logscan.restarts import after_restart
from triage.core.logscan.rules import (
    MISSING_TRACEBACK,
    consequences,
    inferred,
    is_context,
    is_launcher,
    substantive,
    warning,
)
from triage.core.logscan.scanner import OWN_ERROR_KINDS, Event, Scan
from triage.core.logscan.single import hinted, one_process
from triage.core.model import KnowledgeBase

ECHO_FACTOR = 0.5
CONTEXT_FACTOR = 0.5  # frames and umbrellas: they support an entry, never make it the answer
FIRST_BONUS = 0.25
SPREAD_BONUS = 0.03  # per extra rank or line showing the same entry, capped
SPREAD_CAP = 0.1
# A cause line that frames (or other context) elsewhere in the log point to as well: when two
# entries explain the same line (`doesn't have NCCL built in`: a CPU build, or Windows), the one
# the rest of the log supports (frames under C:\...\torch\distributed\) comes first.
CORROBORATION = 0.15
# A warning (`[W socket.cpp:...]`) names a cause, but when an error line names the failure, the
# warning only led up to it: it counts for less than that error's own signature.
WARNING_FACTOR = 0.6
# The patterns across ranks that only say something failed, not what: a traceback that seems
# missing, or mixed with others. (One rank failing while the others echo it, D20, is a finding
# of its own: the reproductions of a diverged rank print exactly that.)
GENERIC_PATTERNS = frozenset({MISSING_TRACEBACK, INTERLEAVED})
SYMPTOM_FACTOR = 0.6  # the scores of a verdict that has only symptoms to go by
THRESHOLD = 0.4  # below it a diagnosis is only "closest", not a finding
MAX_EVIDENCE = 6


@dataclass(frozen=True)
class Diagnosis:
    """An entry the log points at, its score and its evidence."""

    entry_id: str
    score: float
    evidence: tuple[Event, ...]
    reason: str  # one line: why this entry, in the scan's terms
    explains_first: bool = False
    # a symptom any failure can show (only echoes, only context, a traceback that seems missing):
    # it says that something failed, not what
    generic: bool = False


@dataclass
class Verdict:
    """What the log scan concluded: the diagnoses and the first real failure."""

    found: bool
    diagnoses: list[Diagnosis]
    first: Event | None  # the first real failure (or first echo when nothing else)
    first_rank: int | None
    waiting_ranks: list[int] = field(default_factory=list)
    suspect_ranks: list[int] = field(default_factory=list)  # silent while others timed out
    ordered_by: str = "position"  # "time" when timestamps ordered the events
    root_cause_rank: int | None = None  # what torchrun's summary claimed
    by_query_engine: bool = False  # the diagnosis came from the fallback, not a signature
    # when nothing was found: the weak candidates, (entry id, score, why), best first
    closest: list[tuple[str, float, str]] = field(default_factory=list)
    # why the first failing rank is not the first failure's own (its error only echoes another's)
    first_rank_reason: str = ""
    # every finding is a symptom any failure shows (a timeout, a kill, a peer gone): the cause is in
    # output the log does not hold, and the diagnoses are candidates, at lower scores
    only_symptoms: bool = False


def decide(scan: Scan, kb: KnowledgeBase, fallback: bool = True) -> Verdict:
    """The verdict for one scan."""
    scan.ranks.finish()
    ordered, ordered_by = order_events(scan)
    first_seen = scan.root_cause_rank if scan.root_cause_rank is not None else scan.spawn_failed
    events = consequences(ordered, scan.root_cause_rank if scan.no_other_failures else None, first_seen)
    events = one_process(after_restart(events, scan), scan)
    own_lines: set[int | None] = {e.rank for e in events if not is_launcher(e) and e.rank is not None}
    errors = [e for e in events if substantive(e, own_lines)]
    real = errors or [e for e in events if warning(e)]
    echoes = [e for e in events if e.echo]
    hints = [e for e in events if e.real and e.kind != "exit"]
    # With only echoes, the first one that names its rank says who was waiting.
    ranked_echoes = [e for e in echoes if e.rank is not None] or echoes
    first = real[0] if real else (ranked_echoes[0] if echoes else (hints[0] if hints else None))
    first = summary_root_cause(first, real, scan)
    first = owner(first, events, scan)

    waiting, suspects = rank_roles(events, first)
    first_rank = first.rank if first else None
    dead = spawn_peer(first, scan)
    reason = ""
    if dead is not None and first is not None and first.rank is not None:
        first_rank, waiting, suspects = dead, [first.rank], [dead]
        reason = (
            f"mp.spawn reported process {first.rank}, whose error only echoes a lost peer (mp.spawn"
            f" prints one traceback only, so process {dead}'s own is not here)"
        )
    diagnoses = _score(events, first, kb, ECHO_FACTOR if real else 1.0, WARNING_FACTOR if errors else 1.0)
    for item in inferred(events, first, scan):
        if kb.entry(item.entry_id) is None:
            continue
        score = item.score
        if item.score == 0.0:  # a pattern that lends weight to the entry its signatures found
            score = next((d.score for d in diagnoses if d.entry_id == item.entry_id), 0.0) + FIRST_BONUS
        generic = item.entry_id in GENERIC_PATTERNS
        diagnoses.append(
            Diagnosis(
                item.entry_id, round(score, 3), item.evidence, item.reason, item.explains_first, generic
            )
        )
    diagnoses = _merge(diagnoses)
    diagnoses.sort(key=lambda d: (-d.score, d.entry_id))
    # torch's own check refused a call as the script made it (blocks.Block.refused): its message is
    # the finding, and what the other ranks printed only follows from it (a peer gone, the launcher's
    # report), so those symptoms name no entry; the query engine's reading of the message does only
    # when it is as clear as a description's would have to be.
    refused = first is not None and first.refused
    if fallback and not refused:
        diagnoses = _own_reading(diagnoses, events, first, scan, kb)
    found = bool(diagnoses) and diagnoses[0].score >= THRESHOLD
    if refused and not any(d.score >= THRESHOLD and not d.generic for d in diagnoses):
        found = False
    only_symptoms = found and all(d.generic for d in diagnoses if d.score >= THRESHOLD)
    if only_symptoms:
        # Found, for a failure is there; but what the log shows says little about which: every
        # score says so (one factor for all, so the order of the candidates stands).
        diagnoses = [dataclasses.replace(d, score=round(d.score * SYMPTOM_FACTOR, 3)) for d in diagnoses]
    verdict = Verdict(
        found=found,
        diagnoses=diagnoses,
        first=first,
        first_rank=first_rank,
        waiting_ranks=waiting,
        suspect_ranks=suspects,
        ordered_by=ordered_by,
        root_cause_rank=scan.root_cause_rank,
        first_rank_reason=reason,
        only_symptoms=only_symptoms,
    )
    if not found and fallback:
        _fall_back(verdict, scan, events, kb, weak_allowed=not refused)
    return hinted(verdict, events, scan)


def _own_reading(
    diagnoses: list[Diagnosis], events: list[Event], first: Event | None, scan: Scan, kb: KnowledgeBase
) -> list[Diagnosis]:
    """When every finding is a generic symptom and the first failing rank printed an error of its
    own that no signature names, the query engine reads that error: a clear answer goes first (at
    its own calibrated score) and the symptoms below it, for they only say that something failed."""
    if first is None or first.echo or first.kind not in OWN_ERROR_KINDS or is_launcher(first):
        return diagnoses
    strong = [d for d in diagnoses if d.score >= THRESHOLD]
    if not strong or not all(d.generic for d in strong):
        return diagnoses
    from triage.core import matcher

    text = own_text(scan, events, first)
    match = matcher.rank(kb, text, top=3)
    if not in_domain(text, scan, kb) or not clear_lead(match.hits, LOG_THRESHOLD):
        return diagnoses
    best = match.hits[0]
    reading = Diagnosis(
        best.entry.id,
        max(best.score, THRESHOLD),
        (first,),
        "the first failing rank's own error, in the query engine's reading (no signature names it);"
        " the other findings are symptoms any failure shows",
        explains_first=True,
    )
    below = reading.score - 0.01
    rest = [
        dataclasses.replace(d, score=round(min(d.score, below), 3)) if d.generic else d
        for d in diagnoses
        if d.entry_id != reading.entry_id
    ]
    return sorted([reading, *rest], key=lambda d: (-d.score, d.entry_id))


def _closest(verdict: Verdict, hits: list[tuple[str, float]]) -> list[tuple[str, float, str]]:
    found: dict[str, tuple[float, str]] = {}
    for diagnosis in verdict.diagnoses:
        found[diagnosis.entry_id] = (diagnosis.score, "weak signature lines")
    for entry_id, score in hits:
        found.setdefault(entry_id, (score, "words in common with the errors"))
    ranked = sorted(found.items(), key=lambda item: (-item[1][0], item[0]))
    return [(entry_id, score, why) for entry_id, (score, why) in ranked]


def _score(
    events: list[Event],
    first: Event | None,
    kb: KnowledgeBase,
    echo_factor: float,
    warning_factor: float = 1.0,
) -> list[Diagnosis]:
    grouped: dict[str, list[Event]] = {}
    for event in events:
        if event.kind == "hit" and event.entry_id in kb.entries:
            grouped.setdefault(event.entry_id, []).append(event)
    weak_first = first is not None and (first.echo or (first.kind == "hit" and first.weight < 0.5))
    # A paste cut off inside a traceback, before its error line: its frames are all there is, and
    # the deepest ones a signature knows say where it failed (at half their weight).
    cut_off = first is None or (first.kind == "hit" and first.role == "frame")
    result = []
    for entry_id, hits in grouped.items():
        causes = [e for e in hits if not is_context(e)]
        best = max((e.weight * _factor(e, echo_factor, warning_factor) for e in causes), default=0.0)
        context = max((e.weight * CONTEXT_FACTOR for e in hits if is_context(e)), default=0.0)
        if not causes and not cut_off:
            best = min(context, THRESHOLD - 0.01)  # context alone never makes a finding
        elif not causes:
            best = max((e.weight * CONTEXT_FACTOR for e in hits if e.role == "frame"), default=0.0)
        # more ranks showing it, or more lines when the log names no ranks
        ranked = {e.rank for e in causes if e.rank is not None}
        places = len(ranked) if ranked else len({(e.source, e.line) for e in causes})
        spread = min(SPREAD_CAP, SPREAD_BONUS * max(0, places - 1))
        explains_first = first is not None and any(
            e.source == first.source and e.line == first.line for e in causes
        )
        bonus = FIRST_BONUS if explains_first else 0.0
        if first is not None and first.echo:
            bonus = 0.0  # the first echo is only the first rank to give up waiting
        elif weak_first:
            bonus /= 2
        score = best + spread + bonus + (CORROBORATION if causes and context else 0.0)
        all_echo = bool(causes) and all(e.echo for e in causes)
        reason = (
            "only lines that usually echo another rank's failure"
            if all_echo
            else (
                "the first failure in the log"
                if explains_first
                else ("a signature of this failure" if causes else "only where a rank was (frames), not why")
            )
        )
        generic = all_echo or not causes
        result.append(
            Diagnosis(entry_id, round(score, 3), _pick_evidence(hits), reason, explains_first, generic)
        )
    return result


def _factor(event: Event, echo_factor: float, warning_factor: float) -> float:
    """What a cause line's weight counts for: less for an echo, and less for a warning when an
    error line of the log names the failure (the warning is what led up to it, or beside it)."""
    if event.echo:
        return echo_factor
    return warning_factor if event.role == "warning" else 1.0


def _pick_evidence(hits: list[Event]) -> tuple[Event, ...]:
    """Strongest lines first, one per rank before repeats, in time order within a weight."""
    chosen: list[Event] = []
    seen_ranks: set[int | None] = set()
    seen_lines: set[tuple[int, int]] = set()
    ordered = sorted(hits, key=lambda e: (is_context(e), e.echo, -e.weight))
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
            high.generic and low.generic,
        )
    return list(merged.values())


def _fall_back(
    verdict: Verdict, scan: Scan, events: list[Event], kb: KnowledgeBase, weak_allowed: bool = True
) -> None:
    """No signature names the failure: ask the query engine about the errors found (and take its
    answer below a description's threshold only when `weak_allowed`)."""
    from triage.core import matcher

    text = fallback_text(scan, events)
    if not text.strip():
        verdict.closest = _closest(verdict, [])
        return
    match = matcher.rank(kb, text, top=3)
    # the log's own threshold (query_reading.LOG_THRESHOLD) where the engine's, fitted on
    # descriptions, would not answer
    weak = (
        weak_allowed
        and match.verdict == "no_match"
        and match.best is not None
        and match.best.score >= LOG_THRESHOLD
    )
    if not in_domain(text, scan, kb) or match.best is None or (match.verdict == "no_match" and not weak):
        verdict.closest = _closest(verdict, [(hit.entry.id, hit.score) for hit in match.hits])
        return
    evidence = tuple(e for e in events if e.kind in OWN_ERROR_KINDS)[:MAX_EVIDENCE]
    reason = "no signature names this failure; the query engine finds its words in this entry"
    if weak:
        reason += " (below the score a description would need: read it before acting)"
    found = [
        Diagnosis(hit.entry.id, hit.score, evidence, reason, explains_first=index == 0)
        for index, hit in enumerate(match.hits)
    ]
    verdict.diagnoses = _merge(found + verdict.diagnoses)
    verdict.diagnoses.sort(key=lambda d: (-d.score, d.entry_id))
    verdict.found = True
    verdict.by_query_engine = True
