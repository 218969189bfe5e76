"""Validation of the knowledge base: run the rules (triage.kb.rules) and assemble the model.

`check(sources)` turns raw parsed files into a KnowledgeBase while collecting Diagnostics. A
knowledge base with any diagnostic is not used: front ends refuse to run on it.
"""

from __future__ import annotations

from triage.core.model import Entry, KnowledgeBase, Section
from triage.kb.rules import CODES, Context, Diagnostic, run
from triage.kb.sources import Sources

__all__ = ["CODES", "Diagnostic", "check"]


def check(sources: Sources, *, outputs: bool = False) -> tuple[KnowledgeBase | None, list[Diagnostic]]:
    """Validate every file and build the knowledge base; None when any source is wrong.

    With `outputs`, a valid base is also checked against the files generated from it
    (compiled.json, the schema documentation); those problems come back beside the base."""
    ctx = Context.of(sources)
    diagnostics = run(ctx, "sources")
    if diagnostics or ctx.graph is None:
        return None, diagnostics
    ordered = dict(sorted(ctx.entries.items(), key=lambda kv: _order_key(kv[1], ctx.sections)))
    kb = KnowledgeBase(
        entries=ordered, sections=ctx.sections, facts=ctx.facts, graph=ctx.graph, vocabulary=ctx.vocabulary
    )
    if outputs:
        ctx.kb = kb
        return kb, run(ctx, "outputs")
    return kb, []


def _order_key(entry: Entry, sections: tuple[Section, ...]) -> tuple[int, str, int]:
    section_rank = next((i for i, s in enumerate(sections) if s.id == entry.section), len(sections))
    prefix = entry.id.rstrip("0123456789")
    return section_rank, prefix, int(entry.id[len(prefix) :] or 0)
