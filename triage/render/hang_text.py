"""A hang picture as terminal text (the verdict, one row per group of ranks, what the job recorded,
then the fix), and as Markdown lines for `triage report` and the TUI's export."""

from __future__ import annotations

from triage.core.hang.analyse import HangPicture
from triage.core.model import KnowledgeBase
from triage.core.redact import redact_text
from triage.render.document import md_code, md_text
from triage.render.entry_text import entry_lines
from triage.render.terminal import BOLD, DIM, YELLOW, Style


def _ranks(ranks: tuple[int | None, ...]) -> str:
    known = sorted(r for r in ranks if r is not None)
    if not known:
        return "?"
    if len(known) > 2 and known == list(range(known[0], known[-1] + 1)):
        return f"{known[0]}-{known[-1]}"
    return ",".join(str(r) for r in known)


def _label(ranks: tuple[int | None, ...], pid: int) -> str:
    """`rank 0-3`, or the process's PID where no rank is known (a launcher with no worker yet)."""
    return f"PID {pid}" if all(r is None for r in ranks) and pid else f"rank {_ranks(ranks)}"


def hang_lines(kb: KnowledgeBase, picture: HangPicture, style: Style, *, full: bool = False) -> list[str]:
    """A hang picture as terminal lines."""
    lines = [style.paint(f"Verdict: {picture.verdict}", BOLD), ""]
    labels = [_label(g.ranks, g.state.pid) for g in picture.groups]
    width = max((len(label) for label in labels), default=1)
    suspects = set(picture.suspect_ranks)
    lines.append(style.paint("Ranks:", BOLD))
    for group, label in zip(picture.groups, labels, strict=True):
        odd = any(r in suspects for r in group.ranks)
        mark = "!" if odd else " "
        text = f" {mark} {label:<{width}}  {group.state.describe()}"
        context = group.state.context
        if context and context.code:
            text += f"\n   {' ' * width}  {context.code}"
        lines.append(style.paint(text, YELLOW) if odd else text)
    if picture.suspect_ranks:
        lines += ["", f"Suspect ranks: {', '.join(str(r) for r in picture.suspect_ranks)}"]
    if picture.recorded:
        lines += ["", style.paint("Recorded by the job:", BOLD), *(f"  {line}" for line in picture.recorded)]
    for note in picture.notes:
        lines.append(style.paint(f"Note: {note}", DIM))
    if not picture.diagnoses:
        return lines
    best = picture.diagnoses[0]
    entry = kb.entries.get(best.entry)
    if entry is None:
        return lines
    lines += ["", style.paint(f"Diagnosis: {entry.id}  {entry.title}", BOLD), "  evidence:"]
    lines += [f"    {e}" for e in best.evidence]
    others = [d.entry for d in picture.diagnoses[1:] if d.entry in kb.entries]
    if others:
        lines += ["", "Also consistent with:"]
        lines += [f"  {o:<5} {kb.entries[o].title}" for o in others]
    lines += ["", *entry_lines(kb, entry, style, full=full)]
    return lines


def hang_markdown(kb: KnowledgeBase, picture: HangPicture) -> list[str]:
    """The picture as Markdown lines (a section body: no heading), every value redacted."""

    def text(value: str) -> str:
        return md_text(redact_text(value))

    lines = [f"**Verdict:** {text(picture.verdict)}", ""]
    suspects = set(picture.suspect_ranks)
    lines += ["| ranks | doing | line |", "|---|---|---|"]
    for group in picture.groups:
        mark = " (suspect)" if any(r in suspects for r in group.ranks) else ""
        context = group.state.context
        code = md_code(redact_text(context.code)).replace("|", "\\|") if context and context.code else ""
        lines.append(
            f"| {_ranks(group.ranks)}{mark} | {md_text(redact_text(group.state.describe()), table=True)} | {code} |"
        )
    if picture.recorded:
        lines += ["", "Recorded by the job:", "", *(f"- {text(line)}" for line in picture.recorded)]
    if picture.notes:
        lines += ["", *(f"- Note: {text(note)}" for note in picture.notes)]
    if picture.diagnoses:
        best = picture.diagnoses[0]
        entry = kb.entries.get(best.entry)
        title = f" {text(entry.title)}" if entry else ""
        lines += ["", f"**Diagnosis:** {best.entry}{title}", "", *(f"- {text(e)}" for e in best.evidence)]
        others = [d.entry for d in picture.diagnoses[1:]]
        if others:
            lines += ["", f"Also consistent with: {', '.join(others)}"]
    return lines
