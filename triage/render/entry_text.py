"""An entry as terminal text: the view `triage show` and `triage ask` print."""

from __future__ import annotations

from typing import Any

from triage.core.model import Entry, KnowledgeBase
from triage.render.terminal import BOLD, DIM, Style, banner, heading, render_blocks

VERIFY_CHANGE_WORDS = {
    "batch_size": "effective batch size",
    "learning_rate": "learning rate",
    "precision": "numeric precision",
    "data_order": "data order",
    "data_sharding": "which data each rank sees",
    "resume_point": "the resume point",
    "normalization": "normalisation statistics",
}


def _blocks(kb: KnowledgeBase, entry: Entry, field: str) -> list[dict[str, Any]]:
    parsed = kb.docs.get(entry.id, {}).get(field)
    if parsed is not None:
        return parsed
    # Knowledge loaded without its parsed form (tests building a KnowledgeBase by hand).
    return [{"t": "p", "c": [["text", getattr(entry, field)]]}]


def verify_text(entry: Entry) -> str:
    if not entry.verify.needed:
        return entry.verify.why
    changes = ", ".join(VERIFY_CHANGE_WORDS.get(c, c) for c in entry.verify.changes)
    return f"Changes {changes}. {entry.verify.why}"


def entry_lines(kb: KnowledgeBase, entry: Entry, style: Style, *, full: bool = True) -> list[str]:
    lines = [
        style.paint(f"{entry.id}  {entry.title}", BOLD),
        style.paint(f"{kb.section_title(entry.section)} · {entry.kind}", DIM),
        "",
    ]
    lines += render_blocks([{"t": "p", "c": [["text", entry.summary]]}], style)
    if not entry.covered:
        lines += ["", style.paint("triage does not cover this problem; here is where to look instead.", BOLD)]
    lines += [
        "",
        heading("Why it happens", style),
        *render_blocks(_blocks(kb, entry, "root_cause"), style, "  "),
    ]
    lines += ["", heading("Fix", style), *render_blocks(_blocks(kb, entry, "fix"), style, "  ")]
    lines += ["", *banner(entry.verify.needed, verify_text(entry), style)]
    if full:
        if entry.symptoms:
            lines += ["", heading("Symptoms", style)]
            lines += [f"  - {s}" for s in entry.symptoms]
        if entry.signatures:
            lines += ["", heading("Error text it recognises", style)]
            lines += [f"  /{sig.pattern}/" for sig in entry.signatures]
        if entry.confirm:
            lines += ["", heading("Probe facts that confirm it", style)]
            lines += [
                f"  - {c.fact} = {', '.join(c.values)}" + (f": {c.note}" if c.note else "")
                for c in entry.confirm
            ]
    lines += related_lines(kb, entry, style)
    if full and entry.references:
        lines += ["", heading("References", style)]
        lines += [f"  - {ref.title}: {ref.url}" for ref in entry.references]
    return lines


def related_lines(kb: KnowledgeBase, entry: Entry, style: Style) -> list[str]:
    if not entry.related:
        return []
    lines = ["", heading("Related", style)]
    for rel in entry.related:
        other = kb.entries.get(rel)
        lines.append(f"  {rel:<5} {other.title if other else ''}")
    return lines
