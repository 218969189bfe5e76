"""An entry as terminal text: the view `triage show` and `triage ask` print."""

from __future__ import annotations

from typing import Any

from triage.core.model import Entry, KnowledgeBase
from triage.render.parts import PARTS, entry_parts
from triage.render.terminal import BOLD, DIM, Style, banner, heading, render_blocks
from triage.render.verify import verify_headline


def _blocks(kb: KnowledgeBase, entry: Entry, field: str) -> list[dict[str, Any]]:
    parsed = kb.docs.get(entry.id, {}).get(field)
    if parsed is not None:
        return parsed
    # Knowledge loaded without its parsed form (tests building a KnowledgeBase by hand).
    return [{"t": "p", "c": [["text", getattr(entry, field)]]}]


# The parts the terminal shows: all but the graph paths (`triage walk` shows the way there), and
# for a short answer (`ask`, `log`) only what to do and why.
FULL_PARTS = frozenset(p.key for p in PARTS) - {"graph"}
SHORT_PARTS = frozenset({"fix", "verification", "root_cause", "related"})


def entry_lines(kb: KnowledgeBase, entry: Entry, style: Style, *, full: bool = True) -> list[str]:
    """The entry as terminal lines: its heading and summary, then its parts in the one order."""
    lines = [
        style.paint(f"{entry.id}  {entry.title}", BOLD),
        style.paint(f"{kb.section_title(entry.section)} · {entry.kind}", DIM),
        "",
    ]
    lines += render_blocks([{"t": "p", "c": [["text", entry.summary]]}], style)
    if not entry.covered:
        lines += ["", style.paint("triage does not cover this problem; here is where to look instead.", BOLD)]
    return lines + parts_lines(kb, entry, style, FULL_PARTS if full else SHORT_PARTS)


def verify_banner(entry: Entry, style: Style) -> list[str]:
    """The verification note as the terminal shows it everywhere."""
    return banner(entry.verify.needed, verify_headline(entry), entry.verify.why, style)


def parts_lines(kb: KnowledgeBase, entry: Entry, style: Style, keys: frozenset[str]) -> list[str]:
    """The entry's parts named in `keys`, in the one order every front end uses."""
    lines: list[str] = []
    for part in entry_parts(entry, kb, keys):
        if part.key == "verification":
            lines += ["", *verify_banner(entry, style)]
            continue
        body = _part_lines(kb, entry, part.key, style)
        if body:
            lines += ["", heading(part.title, style), *body]
    return lines


def _part_lines(kb: KnowledgeBase, entry: Entry, key: str, style: Style) -> list[str]:
    if key in ("fix", "root_cause"):
        return render_blocks(_blocks(kb, entry, key), style, "  ")
    if key == "symptoms":
        return [f"  - {s}" for s in entry.symptoms]
    if key == "signatures":
        return [f"  /{sig.pattern}/" for sig in entry.signatures]
    if key == "confirm":
        return [
            f"  - {c.fact} = {', '.join(c.values)}" + (f": {c.note}" if c.note else "") for c in entry.confirm
        ]
    if key == "related":
        return [f"  {rel:<5} {kb.entries[rel].title}" for rel in entry.related if rel in kb.entries]
    if key == "references":
        return [f"  - {ref.title}: {ref.url}" for ref in entry.references]
    return []
