"""A hang picture as terminal text: the verdict, one row per group of ranks, then the fix."""

from __future__ import annotations

from triage.core.hang.analyse import HangPicture
from triage.core.model import KnowledgeBase
from triage.render.entry_text import entry_lines
from triage.render.terminal import BOLD, DIM, YELLOW, Style


def _ranks(ranks: tuple[int | None, ...]) -> str:
    known = sorted(r for r in ranks if r is not None)
    if not known:
        return "?"
    if len(known) > 2 and known == list(range(known[0], known[-1] + 1)):
        return f"{known[0]}-{known[-1]}"
    return ",".join(str(r) for r in known)


def hang_lines(kb: KnowledgeBase, picture: HangPicture, style: Style, *, full: bool = False) -> list[str]:
    lines = [style.paint(f"Verdict: {picture.verdict}", BOLD), ""]
    width = max((len(_ranks(g.ranks)) for g in picture.groups), default=1)
    suspects = set(picture.suspect_ranks)
    lines.append(style.paint("Ranks:", BOLD))
    for group in picture.groups:
        odd = any(r in suspects for r in group.ranks)
        mark = "!" if odd else " "
        text = f" {mark} rank {_ranks(group.ranks):<{width}}  {group.state.describe()}"
        context = group.state.context
        if context and context.code:
            text += f"\n   {' ' * (width + 5)}  {context.code}"
        lines.append(style.paint(text, YELLOW) if odd else text)
    if picture.suspect_ranks:
        lines += ["", f"Suspect ranks: {', '.join(str(r) for r in picture.suspect_ranks)}"]
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
