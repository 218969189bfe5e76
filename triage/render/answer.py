"""`triage ask`'s answer on a terminal: the verdict, the verification banner and the fix first.

The default fits a screen: the verdict line, the banner saying whether the fix changes the
science of the run, the entry's one-line summary, the fix (cut at a block boundary when it is long,
with the command that shows the rest), the question that separates two close answers, and the
alternatives on one line each. `full=True` adds why it happens, the symptoms and related entries.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

from triage.core.model import Entry, KnowledgeBase
from triage.render.entry_text import FULL_PARTS, parts_lines, verify_banner
from triage.render.terminal import BOLD, DIM, Style, heading, render_blocks

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import Any

SCREEN_ROWS = 24
MIN_FIX = 4  # lines of the fix shown whatever else there is
_ITEM = re.compile(r"^  (?:\d+\.|-) ")


def verify_mark(entry: Entry) -> str:
    """The `[verify]` mark for entries whose fix changes the experiment."""
    return "[verify]" if entry.verify.needed else ""


def ranking_line(entry: Entry, score: float) -> str:
    """One ranked entry: id, score, the [verify] marker when its fix changes the science, title."""
    return f"  {entry.id:<5} {score:.2f}  {verify_mark(entry):<8}  {entry.title}"


def verdict_line(entry: Entry, score: float, verdict: str) -> str:
    """The first line of an answer: the verdict, the score and the entry."""
    word = "Out of scope" if verdict == "out_of_scope" or not entry.covered else "Best match"
    return f"{word} ({score:.2f}): {entry.id}  {entry.title}"


def field_lines(kb: KnowledgeBase, entry: Entry, field: str, style: Style) -> list[str]:
    """A Markdown field of the entry (fix, root_cause) drawn from its pre-parsed blocks."""
    blocks: list[dict[str, Any]] = kb.docs.get(entry.id, {}).get(field) or [
        {"t": "p", "c": [["text", str(getattr(entry, field))]]}
    ]
    return render_blocks(blocks, style, "  ")


def cut(lines: list[str], room: int, rest: str) -> list[str]:
    """`lines` fitted into `room` lines: cut at the last blank line that fits (a block boundary),
    ending with one line that says what was left out and where to read it."""
    if len(lines) <= room:
        return lines
    keep = max(1, room - 1)
    # A boundary: a blank line between blocks, or the start of a top-level list item.
    # Whole list items first; a paragraph break inside one only when no item ends in time.
    items = [i for i in range(3, keep + 1) if _ITEM.match(lines[i])]
    blanks = [i for i in range(3, keep + 1) if not lines[i].strip()]
    if items or blanks:
        keep = (items or blanks)[-1]
    while keep > 1 and not lines[keep - 1].strip():
        keep -= 1
    hidden = len(lines) - keep
    return [*lines[:keep], f"  … {hidden} more lines of the fix: {rest}"]


def question_lines(question: object, style: Style, unsure: bool = False) -> list[str]:
    """The graph's question that separates the two best answers (close ones, or both below the
    confidence an answer needs: `unsure`), with the answer leading to each."""
    prompt = getattr(question, "prompt", "")
    options: Sequence[tuple[str, str]] = getattr(question, "options", ())
    if not prompt or not options:
        return []
    ids = " and ".join(entry_id for _, entry_id in options)
    heading = "Not sure between" if unsure else "Close call between"
    lines = [style.paint(f"{heading} {ids}. The question that separates them:", BOLD)]
    lines.append(f"  {prompt}")
    lines += [f"    “{label}” → {entry_id}" for label, entry_id in options]
    return lines


def _clip(lines: list[str], most: int) -> list[str]:
    if len(lines) <= most:
        return lines
    return [*lines[: most - 1], lines[most - 1].rstrip() + " …"]


def answer_lines(
    kb: KnowledgeBase,
    entry: Entry,
    score: float,
    verdict: str,
    alternatives: Sequence[tuple[Entry, float]],
    style: Style,
    *,
    question: object | None = None,
    full: bool = False,
    rows: int = SCREEN_ROWS,
) -> list[str]:
    """The whole answer; within `rows` lines unless `full`."""
    title = textwrap.wrap(verdict_line(entry, score, verdict), style.width, break_long_words=False)
    head = [style.paint(line, BOLD) for line in _clip(title, 2)]
    verify = verify_banner(entry, style)
    summary = render_blocks([{"t": "p", "c": [["text", entry.summary]]}], style)
    fix = field_lines(kb, entry, "fix", style)
    asked = ["", *question_lines(question, style)] if question is not None else []
    others = [ranking_line(other, other_score) for other, other_score in alternatives]
    if full:
        rest = parts_lines(kb, entry, style, FULL_PARTS - {"verification"})
        tail = [
            *asked,
            *(["", style.paint("Also possible (triage show ID):", BOLD), *others] if others else []),
        ]
        return [*head, *verify, "", *summary, *rest, *tail]
    others = [line if len(line) <= style.width else line[: style.width - 1] + "…" for line in others]
    # Within the screen: the verdict, the banner and the start of the fix always; the rest shrinks.
    verify = _clip(verify, 4)
    summary = _clip(summary, 3)
    fixed = len(head) + len(verify) + 1 + len(asked) + 4  # blank, "Fix", blank, the closing hint
    while others and fixed + len(summary) + 2 + len(others) + MIN_FIX > rows:
        others.pop()
    while len(summary) > 1 and fixed + len(summary) + MIN_FIX > rows:
        summary = _clip(summary, len(summary) - 1)
    tail = [*asked, *(["", style.paint("Also possible (triage show ID):", BOLD), *others] if others else [])]
    room = rows - (len(head) + len(verify) + 1 + len(summary) + len(tail) + 4)
    body = cut(fix, max(MIN_FIX, room), f"triage show {entry.id}")
    more = style.paint(
        f"(triage ask --full, or triage show {entry.id}, for why it happens and the rest)", DIM
    )
    return [*head, *verify, "", *summary, "", heading("Fix", style), *body, *tail, "", more]
