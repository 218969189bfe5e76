"""The scan: lines in, events out (signature hits, unexplained exceptions, worker exits).

The scanner is pure: it is handed lines (or blocks of whole lines, for speed) with the name of
their source and their line numbers, and it never opens a file. It keeps a bounded number of
events, so memory stays flat however long the log is; counters keep the totals.

Three kinds of event come out:

- `hit`: a line matched a knowledge signature (`echo` when the signature says the line usually
  echoes another rank's failure);
- `exception`: a Python exception line no non-echo signature explains: a rank's own failure whose
  cause the knowledge does not name (`FloatingPointError: loss is nan`);
- `exit`: torchrun's report that a worker exited (`failed (exitcode: 1) local_rank: 1`, and the
  failure summary); exit code -15 (SIGTERM) means the launcher stopped a rank that was still
  running, usually because it was waiting for the one that failed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from triage.core.logscan.patterns import STRUCTURAL_ANCHORS, SignatureSet
from triage.core.logscan.prefixes import rank_from_path, rank_in_message, split_prefix
from triage.core.logscan.timestamps import timestamp
from triage.core.model import Signature

MAX_EVENTS = 5000  # events kept in full; past it, only the first of each (kind, entry, rank)
MAX_TEXT = 400  # characters of a line kept as evidence

_EXCEPTION = re.compile(
    r"^\s*(?P<name>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::\s*(?P<msg>.*))?$"
)
_EXIT_LINE = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
_SUMMARY_RANK = re.compile(r"^\s*rank\s*: (?P<rank>\d+) \(local_rank: \d+\)")
_SUMMARY_EXIT = re.compile(r"^\s*exitcode\s*: (?P<code>-?\d+)")
_SUMMARY_ROOT = re.compile(r"Root Cause \(first observed failure\)", re.IGNORECASE)
SIGTERM_EXIT = -15
SUBSTANTIVE_WEIGHT = 0.5  # a weaker non-echo signature is a hint: it does not explain a line


def _explains(signature: Signature) -> bool:
    return not signature.echo and signature.weight >= SUBSTANTIVE_WEIGHT


@dataclass(frozen=True)
class Event:
    kind: str  # "hit" | "exception" | "exit"
    source: int  # index into Scan.sources
    line: int  # 1-based
    rank: int | None
    time: float | None  # from the line's own timestamp
    text: str  # the line without its rank prefix, shortened
    entry_id: str = ""  # hits: the entry
    weight: float = 0.0  # hits: the signature's weight
    echo: bool = False  # hits: the signature marks the line as an echo
    note: str = ""  # hits: the signature's note; exceptions: the exception name
    exit_code: int | None = None  # exits

    @property
    def real(self) -> bool:
        """A rank's own failure, as opposed to an echo of someone else's."""
        if self.kind == "hit":
            return not self.echo
        if self.kind == "exit":
            return self.exit_code not in (None, 0, SIGTERM_EXIT)
        return True


@dataclass
class Scan:
    """What a scan found: the sources, the events kept, and totals."""

    sources: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    lines: int = 0  # lines scanned (all of them, not only candidates)
    candidates: int = 0  # lines that passed the prefilter
    hits: int = 0  # signature hits, including those not kept (a line can hold several)
    hit_lines: int = 0  # lines with at least one signature hit
    dropped: int = 0  # events not kept because of MAX_EVENTS
    ranks_seen: set[int] = field(default_factory=set)
    root_cause_rank: int | None = None  # the rank torchrun's summary calls the root cause


class Scanner:
    """Feed it lines or blocks; read `scan` when done."""

    def __init__(self, signatures: SignatureSet) -> None:
        self.signatures = signatures
        self.scan = Scan()
        self._anchor_items = sorted(signatures.by_anchor.items())
        self._kept: set[tuple[str, str, int | None]] = set()
        # torchrun's failure summary spreads one failure over several lines
        self._summary_rank: dict[int, int] = {}
        self._summary_root: dict[int, bool] = {}
        self._source_rank: dict[int, int | None] = {}

    def source(self, name: str) -> int:
        """Register a source (file name or `<stdin>`); returns its index for feed calls."""
        self.scan.sources.append(name)
        index = len(self.scan.sources) - 1
        self._source_rank[index] = rank_from_path(name)
        return index

    # -- input ---------------------------------------------------------------------------

    def feed_lines(self, source: int, lines: Iterable[str], first_line: int = 1) -> None:
        """Scan lines one at a time (tests, small inputs): every line goes through the prefilter."""
        number = first_line - 1
        anchors = self.signatures.anchors
        for number, line in enumerate(lines, start=first_line):
            text = line.rstrip("\r\n")
            lowered = text.lower() + "\n"
            if self.signatures.unanchored or any(a in lowered for a in anchors):
                self.feed_candidate(source, number, text)
        self.scan.lines += max(0, number - first_line + 1)

    def feed_block(self, source: int, block: bytes, first_line: int) -> int:
        """Scan a block of whole lines (ending with a newline, or the source's last line).

        The prefilter runs over the whole block at C speed; only lines holding an anchor are
        decoded and matched. Returns the number of lines in the block.
        """
        if not block:
            return 0
        lines_in_block = block.count(b"\n") + (0 if block.endswith(b"\n") else 1)
        self.scan.lines += lines_in_block
        lowered = block.lower()
        starts: set[int] = set()
        if self.signatures.unanchored:
            starts.update(_all_line_starts(block))
        else:
            for anchor in self.signatures.anchors:
                needle = anchor.encode("utf-8")
                position = lowered.find(needle)
                while position != -1:
                    start = lowered.rfind(b"\n", 0, position) + 1
                    starts.add(start)
                    end = lowered.find(b"\n", position)
                    if end == -1:
                        break
                    position = lowered.find(needle, end + 1)
        counted_to, number = 0, first_line
        for start in sorted(starts):
            number += block.count(b"\n", counted_to, start)
            counted_to = start
            end = block.find(b"\n", start)
            raw = block[start:] if end == -1 else block[start:end]
            self.feed_candidate(source, number, raw.decode("utf-8", "replace").rstrip("\r"))
        return lines_in_block

    # -- one candidate line --------------------------------------------------------------

    def feed_candidate(self, source: int, number: int, line: str) -> None:
        """Match one line that passed the prefilter against the signatures and the parsers."""
        self.scan.candidates += 1
        split = split_prefix(line)
        body = split.body
        rank = split.rank
        if rank is None:
            rank = self._source_rank.get(source)
        if rank is None:
            rank = rank_in_message(body)
        if rank is not None:
            self.scan.ranks_seen.add(rank)
        when = timestamp(line)
        short = body.strip()[:MAX_TEXT]
        lowered = line.lower()

        tried: set[int] = set()
        candidates: list[int] = []
        for anchor, indexes in self._anchor_items:
            if anchor in lowered:
                for position in indexes:
                    if position not in tried:
                        tried.add(position)
                        candidates.append(position)
        candidates.extend(self.signatures.unanchored)

        explained = False
        echoed = False
        hits_before = self.scan.hits
        for position in candidates:
            item = self.signatures.signatures[position]
            if item.regex.search(body) or (body is not line and item.regex.search(line)):
                sig = item.signature
                self._hit(item.entry_id, sig.weight, sig.echo, sig.note, source, number, rank, when, short)
                explained = explained or _explains(sig)
                echoed = echoed or sig.echo
        if self.scan.hits > hits_before:
            self.scan.hit_lines += 1

        self._structure(source, number, rank, when, body, short, explained or echoed)

    def _structure(
        self,
        source: int,
        number: int,
        rank: int | None,
        when: float | None,
        body: str,
        short: str,
        matched: bool,
    ) -> None:
        """The parts of the log the scanner reads itself: exceptions, torchrun's exit reports."""
        if _SUMMARY_ROOT.search(body):
            self._summary_root[source] = True
            return
        exit_line = _EXIT_LINE.search(body)
        if exit_line:
            self._exit(source, number, int(exit_line["rank"]), when, short, int(exit_line["code"]))
            return
        summary_rank = _SUMMARY_RANK.match(body)
        if summary_rank:
            self._summary_rank[source] = int(summary_rank["rank"])
            if self._summary_root.pop(source, False):
                self.scan.root_cause_rank = int(summary_rank["rank"])
            return
        summary_exit = _SUMMARY_EXIT.match(body)
        if summary_exit and source in self._summary_rank:
            worker = self._summary_rank.pop(source)
            self._exit(source, number, worker, when, short, int(summary_exit["code"]))
            return
        if not matched:
            exception = _EXCEPTION.match(body)
            if exception:
                self._add(Event("exception", source, number, rank, when, short, note=exception["name"]))

    def _hit(
        self,
        entry_id: str,
        weight: float,
        echo: bool,
        note: str,
        source: int,
        number: int,
        rank: int | None,
        when: float | None,
        text: str,
    ) -> None:
        self.scan.hits += 1
        self._add(Event("hit", source, number, rank, when, text, entry_id, weight, echo, note))

    def _exit(self, source: int, number: int, rank: int, when: float | None, text: str, code: int) -> None:
        self.scan.ranks_seen.add(rank)
        self._add(Event("exit", source, number, rank, when, text, exit_code=code))

    def _add(self, event: Event) -> None:
        key = (event.kind, event.entry_id, event.rank)
        if len(self.scan.events) < MAX_EVENTS or key not in self._kept:
            self._kept.add(key)
            self.scan.events.append(event)
        else:
            self.scan.dropped += 1


def _all_line_starts(block: bytes) -> list[int]:
    starts = [0]
    position = block.find(b"\n")
    while position != -1 and position + 1 < len(block):
        starts.append(position + 1)
        position = block.find(b"\n", position + 1)
    return starts


def scan_lines(signatures: SignatureSet, lines: Iterable[tuple[str, int, str]]) -> Scan:
    """Scan `(source, line number, text)` triples: the simple, pure entry point."""
    scanner = Scanner(signatures)
    indexes: dict[str, int] = {}
    for name, number, text in lines:
        if name not in indexes:
            indexes[name] = scanner.source(name)
        scanner.scan.lines += 1
        lowered = text.lower().rstrip("\r\n") + "\n"
        if signatures.unanchored or any(a in lowered for a in signatures.anchors):
            scanner.feed_candidate(indexes[name], number, text.rstrip("\r\n"))
    return scanner.scan


__all__ = ["STRUCTURAL_ANCHORS", "Event", "Scan", "Scanner", "scan_lines"]
