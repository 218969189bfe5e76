"""A paste read by the log engine as `triage log -` reads one: the verdict the tests check."""

from __future__ import annotations

from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import Scanner
from triage.core.logscan.verdict import Verdict, decide
from triage.core.model import KnowledgeBase


def verdict_for(kb: KnowledgeBase, text: str) -> Verdict:
    """The log engine's verdict on `text` pasted as one source."""
    scanner = Scanner(compile_signatures(kb))
    scanner.feed_block(scanner.source("paste"), text.encode(), 1)
    return decide(scanner.scan, kb)
