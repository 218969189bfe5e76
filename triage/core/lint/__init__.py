"""`triage lint`: static analysis of training scripts for the bugs that hang or silently corrupt a
distributed run. Pure: it gets source text and returns findings; reading files is the caller's job.

    findings = lint_source(text, "train.py")
"""

from __future__ import annotations

from dataclasses import dataclass

from triage.core.lint.context import Context, LaunchFacts
from triage.core.lint.launch import Launch, find_launches
from triage.core.lint.model import Finding, Rule, Selection, Severity
from triage.core.lint.registry import CHECKS, RULES, rule
from triage.core.lint.rules_launch import loads_checkpoint
from triage.core.lint.script import Script
from triage.core.lint.source import SourceError, decode_source, parse
from triage.core.lint.suppress import suppressed

__all__ = [
    "RULES",
    "Finding",
    "Launch",
    "LaunchFacts",
    "Rule",
    "ScriptFacts",
    "Selection",
    "Severity",
    "SourceError",
    "decode_source",
    "describe",
    "find_launches",
    "lint_source",
    "parse",
    "rule",
]


@dataclass(frozen=True)
class ScriptFacts:
    """What a script is, beyond its findings: for the lint probe's facts."""

    distributed: bool
    loads_checkpoint: bool


def describe(source: str, path: str) -> ScriptFacts:
    """Whether the script runs as several processes and whether it restores a checkpoint."""
    script = Script(source, path)
    return ScriptFacts(script.distributed, loads_checkpoint(script))


def lint_source(
    source: str, path: str, selection: Selection | None = None, launch: LaunchFacts | None = None
) -> list[Finding]:
    """Every finding for one script, sorted by position; SourceError when it is not Python."""
    selection = selection or Selection()
    script = Script(source, path)
    if not script.distributed and not (launch and launch.max_restarts):
        return []  # a plain single-process script has none of these bugs
    ctx = Context.build(script, launch)
    ignored = suppressed(source)
    found: dict[tuple[int, int, str], Finding] = {}
    for check in CHECKS:
        for finding in check(ctx):
            if not selection.wants(finding.code):
                continue
            codes = ignored.get(finding.line)
            if codes is not None and (not codes or finding.code in codes):
                continue
            found.setdefault((finding.line, finding.col, finding.code), finding)
    return sorted(found.values(), key=lambda f: (f.line, f.col, f.code))
