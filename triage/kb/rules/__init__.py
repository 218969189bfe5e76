"""Validation rules over the knowledge base, one small function each (see `registry`).

Importing this package registers every rule; `RULES` lists them in the order they run.
"""

from __future__ import annotations

from triage.kb.rules import entries, facts, files, graph, outputs, signatures, structure  # noqa: F401  (registers)
from triage.kb.rules.context import Context
from triage.kb.rules.registry import CODES, RULES, Diagnostic, Finding, Rule, Stage, rule, rules_by_code

__all__ = [
    "CODES",
    "RULES",
    "Context",
    "Diagnostic",
    "Finding",
    "Rule",
    "Stage",
    "rule",
    "rules_by_code",
    "run",
]


def run(ctx: Context, stage: Stage = "sources") -> list[Diagnostic]:
    """Every rule of `stage` on `ctx`; the diagnostics in file and line order."""
    found = [d for r in RULES if r.stage == stage for d in r.run(ctx)]
    return sorted(found, key=lambda d: (d.file, d.line))
