"""Anchors: the literal text a signature's every match contains, which the prefilter searches."""

from __future__ import annotations

import re

import pytest

from triage.core.logscan.patterns import anchors_of, compile_signatures
from triage.core.model import KnowledgeBase


@pytest.mark.parametrize(
    ("pattern", "anchors"),
    [
        (
            "Expected to have finished reduction in the prior iteration",
            ("expected to have finished reduction in the prior iteration",),
        ),
        (r"Timed out waiting \d+ms for (recv|send) operation to complete", (" operation to complete",)),
        (r"failed \(exitcode: -11\)", ("failed (exitcode: -11)",)),
        (r"CUDA out of memory|OutOfMemoryError", ("cuda out of memory", "outofmemoryerror")),
        (r"\d+", ()),
    ],
)
def test_anchor_extraction(pattern: str, anchors: tuple[str, ...]) -> None:
    assert anchors_of(pattern) == anchors


def test_every_knowledge_signature_has_an_anchor_its_matches_contain(kb: KnowledgeBase) -> None:
    """A signature without an anchor would be tried on every line of every log (and disable grep)."""
    signatures = compile_signatures(kb)
    assert signatures.signatures, "the knowledge base has signatures"
    missing = [f"{s.entry_id}: {s.signature.pattern}" for s in signatures.signatures if not s.anchors]
    assert missing == []


def test_anchors_hold_for_matching_text() -> None:
    pattern = r"NET/IB\s*: Got completion from peer .* with (error |status=)12\b"
    regex = re.compile(pattern, re.IGNORECASE)
    line = "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion from peer 10.2.0.5<33092> with error 12, opcode 0"
    assert regex.search(line)
    assert any(anchor in line.lower() for anchor in anchors_of(pattern))


def test_the_compiled_index_analysis_is_what_parsing_the_patterns_gives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`triage log` takes each signature's anchors, bounded pattern and reach from the compiled
    index instead of parsing ~800 regexes on every start: they must be what parsing gives."""
    from triage.core.logscan import patterns
    from triage.kb.loader import load_kb

    kb = load_kb()
    assert patterns._prepared(kb) is not None
    read = patterns.compile_signatures(kb)
    monkeypatch.setattr(patterns, "_prepared", lambda kb: None)
    parsed = patterns.compile_signatures(kb)
    assert len(read.signatures) == len(parsed.signatures) > 100
    for a, b in zip(read.signatures, parsed.signatures, strict=True):
        assert (a.anchors, a.reach, a.regex.pattern) == (b.anchors, b.reach, b.regex.pattern)
    assert (read.by_anchor, read.unanchored) == (parsed.by_anchor, parsed.unanchored)
