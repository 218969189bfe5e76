"""The transcript as data: what triage said, what the user answered, what each probe found.

Built afresh from the session after every change, so the transcript can never disagree with the
walk (Back simply yields a shorter conversation). Each line carries a key; the transcript widget
keeps the lines whose keys are unchanged and redraws only from the first difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from triage.core.model import ProbeNode, QuestionNode
from triage.core.session import ProbeRecord, Session
from triage.core.walker import Step

Side = Literal["triage", "user", "probe", "note"]

WELCOME = (
    "I will ask what you see and check this machine where I can, until we reach a fix. "
    "Pick an answer below, or press / to search and describe it in your own words."
)


@dataclass(frozen=True)
class Line:
    """One message of the transcript."""

    key: tuple[object, ...]
    side: Side
    text: str
    detail: str = ""
    tone: str = ""  # for probe lines: the probe's status, "cancelled" or "override"


def conversation(session: Session, notes: Mapping[int, Sequence[str]]) -> list[Line]:
    """Every line of the transcript for the session's walk; `notes` are triage's remarks, keyed by
    the trail length they were made at (a remark made at the third question is shown there)."""
    kb = session.kb
    position = session.position
    lines = [Line(("welcome",), "triage", WELCOME)]

    def add_notes(at: int) -> None:
        for n, note in enumerate(notes.get(at, ())):
            lines.append(Line(("note", at, n, note), "note", note))

    for index, step in enumerate(position.trail):
        add_notes(index)
        node = kb.graph.nodes[step.node]
        if isinstance(node, QuestionNode):
            lines.append(Line(("q", index, node.id), "triage", node.prompt))
            own = session.own_words.get(node.id, "")
            detail = f"in your words: “{own}”" if own else ""
            lines.append(Line(("a", index, node.id, step.answer, own), "user", step.answer, detail))
        elif session.skipped_step(step):
            continue  # a probe that could not run at all (no script given): nothing to report
        else:
            lines.append(probe_line(session, index, node, step))
            if step.via == "override":
                target = session.target_title(step.target)
                lines.append(
                    Line(
                        ("o", index, node.id, step.answer), "user", f"Take the “{step.answer}” branch", target
                    )
                )
    add_notes(len(position.trail))
    if isinstance(position.node, QuestionNode):
        lines.append(Line(("q", len(position.trail), position.node.id), "triage", position.node.prompt))
    elif position.leaf is not None:
        entry = position.leaf
        lines.append(Line(("leaf", entry.id), "triage", f"That points to {entry.id}: {entry.title}"))
    return lines


def probe_line(session: Session, index: int, node: ProbeNode, step: Step) -> Line:
    """A probe's finding: what it checked, its status and summary, and where the walk went."""
    record = session.record_for(node.id)
    target = session.target_title(step.target)
    found = _found(record, node)
    if step.via == "fallback":
        why = "cancelled" if record is not None and record.cancelled else (found or "unavailable")
        tone = "cancelled" if record is not None and record.cancelled else "unavailable"
        detail = f"{_probe_name(session, node)}: {why}; asking you instead"
    else:
        tone = record.result.status if record is not None and record.result is not None else "ok"
        value = f"{node.fact} = {_value_text(record, node)}" if step.via != "override" else ""
        summary = found or value
        detail = f"{_probe_name(session, node)}: {summary} → {target}" if step.via != "override" else ""
        if step.via == "override":
            detail = f"{_probe_name(session, node)}: {found or 'not run'}"
            tone = "override"
    return Line(("p", index, node.id, step.answer, step.via), "probe", node.prompt, detail, tone)


def evidence_text(record: ProbeRecord | None, limit: int = 6) -> str:
    """The first lines of a probe's evidence, for the transcript and the result screen."""
    if record is None or record.result is None:
        return ""
    from triage.core.redact import redact_text

    out: list[str] = []
    for item in record.result.evidence:
        out.append(f"$ {item.source}")
        out.extend(line for line in item.output.splitlines()[:limit] if line.strip())
    return redact_text("\n".join(out[: limit * 2]))


def _probe_name(session: Session, node: ProbeNode) -> str:
    return session.probe_name(node)


def _found(record: ProbeRecord | None, node: ProbeNode) -> str:
    if record is None:
        return ""
    if record.cancelled:
        return "cancelled"
    assert record.result is not None
    return record.result.summary or f"{record.result.status}"


def _value_text(record: ProbeRecord | None, node: ProbeNode) -> str:
    if record is None or record.result is None:
        return "?"
    value = record.result.facts.get(node.fact)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
