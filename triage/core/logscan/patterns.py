"""The knowledge base's signatures, compiled for scanning large logs quickly.

Running every signature's regex on every line is far too slow for a multi-GB log. Each regex is
parsed once to find the literal text any match must contain (its *anchors*: one required
substring, or one per branch of an alternation). A line is only handed to the regexes when it
contains an anchor, which a byte search (or grep) finds at memory speed. Lines also pass when
they carry the structural markers the scanner reads itself (a Python exception, torchrun's exit
reports), listed in STRUCTURAL_ANCHORS.

Every regex is compiled with its repeats bounded and searched in bounded windows
(triage.core.safe_regex), so no line, however long or hostile, makes a scan hang.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from triage.core.model import KnowledgeBase, Signature
from triage.core.regex_literals import best_requirement
from triage.core.safe_regex import MATCH_CHARS, bounded, reach, windows

# Markers of lines the scanner parses itself, whatever the knowledge says (lower case).
STRUCTURAL_ANCHORS: tuple[str, ...] = (
    "error:",  # a Python exception line: `ValueError: ...`
    "exception:",
    "error\n",  # an exception without a message (the scanner sees lines with their newline)
    "interrupt\n",  # `KeyboardInterrupt`, bare: where a rank stood when the job was stopped by hand
    "exitcode",  # torchrun: `failed (exitcode: 1) local_rank: 1` and the failure summary
    "local_rank:",  # the summary's `rank : 1 (local_rank: 1)`
    "first observed failure",
    "calledprocesserror",  # the legacy launcher's exit report
    "exits with return code",  # DeepSpeed's launcher's exit report
    "destroyed on rank",  # `Process Group destroyed on rank 0`: the rank a bare error belongs to
    "traceback (most recent call last)",  # a rank's traceback, read as a block
    'file "',  # its frames: where the rank was blocked
    "optype=",  # watchdog and desync lines naming a rank's collective
    "terminate called",  # a C++ exception or abort
    "what():",
    "nccl warn",
    "last error:",  # NCCL's umbrella errors: the cause is on the next line
    "(most recent call first)",  # faulthandler's dump of a thread
    "terminated with the following error",  # mp.spawn naming the process whose traceback follows
    "via signal sigterm",  # mp.spawn stopping the processes still running after one failed
    " busid ",  # NCCL's `comm ... rank 1 nranks 2 cudaDev 0 busId 86000`: which GPU each rank holds
    "<no_other_failures>",  # torchrun's summary: only one worker failed
    "raise ",  # the source line under a traceback's innermost frame: torch's own check raised (blocks.py)
)


@dataclass(frozen=True)
class CompiledSignature:
    """A signature compiled for scanning, with its anchors."""

    entry_id: str
    index: int  # position in the entry's `signatures`
    signature: Signature
    regex: re.Pattern[str]  # compiled from the pattern with its repeats bounded (safe_regex.bounded)
    anchors: tuple[str, ...]  # lower-case; a match contains at least one ()= no anchor found)
    reach: int = MATCH_CHARS  # how far a match can extend around an anchor

    def search(self, text: str) -> bool:
        """Whether the signature matches `text`; a long text only in windows around its anchors."""
        if len(text) <= MATCH_CHARS:
            return self.regex.search(text) is not None
        return any(self.regex.search(part) for part in windows(text, text.lower(), self.anchors, self.reach))


@dataclass(frozen=True)
class SignatureSet:
    """Every compiled signature, indexed by anchor."""

    signatures: tuple[CompiledSignature, ...]
    # anchor -> indexes into `signatures` that it can start
    by_anchor: dict[str, tuple[int, ...]]
    # signatures with no anchor: tried on every line (slow; the knowledge tests forbid them)
    unanchored: tuple[int, ...]

    @property
    def anchors(self) -> tuple[str, ...]:
        """Every lower-case literal whose presence makes a line worth a closer look."""
        return tuple(sorted(set(self.by_anchor) | set(STRUCTURAL_ANCHORS)))


def compile_signatures(kb: KnowledgeBase) -> SignatureSet:
    """Compile every signature of every entry; regexes that do not compile are skipped."""
    compiled: list[CompiledSignature] = []
    prepared = _prepared(kb)
    for entry in kb.entries.values():
        rows = prepared.get(entry.id) if prepared is not None else None
        for index, sig in enumerate(entry.signatures):
            row = rows[index] if isinstance(rows, list) and index < len(rows) else None
            if isinstance(row, list) and len(row) == 6 and row[0] == sig.pattern:
                # the compiled index's analysis of this pattern (the same functions, at build time)
                pattern, anchors, span = str(row[4]), tuple(sorted(set(row[3]))), int(row[5])
            else:
                pattern = bounded(sig.pattern)
                anchors, span = anchors_of(sig.pattern), reach(pattern)
            try:
                regex = re.compile(pattern, re.IGNORECASE)
            except re.error:
                continue  # `kb check` reports it; a scan should still run
            compiled.append(CompiledSignature(entry.id, index, sig, regex, anchors, span))
    by_anchor: dict[str, list[int]] = {}
    unanchored = []
    for position, item in enumerate(compiled):
        if not item.anchors:
            unanchored.append(position)
        for anchor in item.anchors:
            by_anchor.setdefault(anchor, []).append(position)
    return SignatureSet(tuple(compiled), {k: tuple(v) for k, v in by_anchor.items()}, tuple(unanchored))


def _prepared(kb: KnowledgeBase) -> Mapping[str, object] | None:
    """Entry id -> its signatures as the compiled index analysed them (anchors, bounded pattern,
    reach: triage.core.match_index), which spares every `triage log` parsing each signature's regex again; None
    when the knowledge has no compiled index."""
    data = kb.match_index
    signatures = data.get("signatures") if isinstance(data, Mapping) else None
    return signatures if isinstance(signatures, Mapping) else None


def anchors_of(pattern: str) -> tuple[str, ...]:
    """Lower-case literals of which every match of `pattern` contains at least one; () if none."""
    return tuple(sorted(set(best_requirement(pattern))))
