"""The scan: lines in, events out (signature hits, a rank's own errors, worker exits).

The scanner is pure: it is handed lines (or blocks of whole lines, for speed) with the name of
their source and their line numbers, and it never opens a file. It keeps a bounded number of
events, so memory stays flat however long the log is; counters keep the totals.

The events:

- `hit`: a line matched a knowledge signature (`echo` when the signature says the line usually
  echoes another rank's failure). Its `role` says when the line cannot be a cause by its form:
  `frame` for a traceback frame (`File "...", line 3, in barrier`: where a rank was, not why it
  failed), `umbrella` for NCCL's error classes (`ncclSystemError`), whose cause is elsewhere;
- `exception`, `terminate` (a C++ exception's `what():`), `abort` (`terminate called without an
  active exception`), `warn` (an NCCL WARN line) and `detail` (the line after NCCL's
  `Last error:`): a rank's own error that no signature explains (structure.py reads them);
- `exit`: a launcher's report that a worker exited; exit code -15 (SIGTERM) means the launcher
  stopped a rank that was still running, usually because it was waiting for the one that failed.

Each rank's traceback is also read as a block (blocks.py): the collective it was blocked in and
the line of the user's code that called it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from triage.core.logscan.blocks import RankReader
from triage.core.logscan.flattened import split_flattened
from triage.core.logscan.native_checks import torch_frame
from triage.core.logscan.patterns import STRUCTURAL_ANCHORS, SignatureSet
from triage.core.logscan.prefixes import clean, rank_from_path, rank_in_message, split_prefix
from triage.core.logscan.source_lines import is_source_line
from triage.core.logscan.structure import OUTSIDE_SIGTERM, SIGTERM_EXIT, UMBRELLA, Found, Structure
from triage.core.logscan.timestamps import timestamp
from triage.core.redact import redact_text

MAX_EVENTS = 5000  # events kept in full; past it, only the first of each (kind, entry, rank)
MAX_PER_KEY = 100  # events kept of one (kind, entry, rank): a log where every line is a hit
MAX_RANKS = 4096  # ranks tracked one by one; lines naming ranks beyond are counted, rankless
MAX_TEXT = 400  # characters of a line kept as evidence (after redaction)
RAW_TEXT = 4 * MAX_TEXT  # characters redaction sees first: a secret cut in half is not recognised
REPEATS = 4  # times a line of one shape from one rank is read in full before repeats are only counted
MAX_SHAPES = 50_000  # shapes remembered (the memory of a log whose every line is new stays bounded)
_DIGITS = bytes.maketrans(b"0123456789", b"0000000000")
SHAPE_PREFIX = 32  # bytes of a line kept as they are in its shape key: where launchers put the rank
# Lines that may open or continue a multi-line structure (a traceback, an NCCL error): never skipped.
_STRUCTURAL = re.compile(r"traceback|file \"|error|exception|terminate|what\(\)|warn|exit|signal|spawn")
MAX_HEAD = 16 << 10  # characters of each source kept for the query-engine fallback
SUBSTANTIVE_WEIGHT = 0.5  # a weaker non-echo signature is a hint: it does not explain a line
_FRAME_LINE = re.compile(r'^\s*(File "[^"]*", line \d+|frame #\d+:|#\d+ 0x[0-9a-f]+ in )')
# A frame in a frozen module or in code given as a string (`File "<frozen os>"`, `File "<string>"`)
# prints no source line under it: the line after it is the next frame or the exception itself.
_NO_SOURCE_FRAME = re.compile(r'^\s*File "<[^"]*>", line \d+')
# An exception's name and message: never the source line a frame quotes.
_EXCEPTION_LINE = re.compile(r"^\s*(?:[A-Za-z_]\w*\.){0,8}[A-Z]\w*(?:Error|Exception|Interrupt|Exit): ")
_LAST_ERROR = b"last error:"
_FRAME_ANCHOR = b'file "'  # a frame in torch's code: the call it quotes below is read too (native_checks.py)
_MESSAGE_BELOW = (b"error:", b"exception:")  # with nothing after them: the message is on the next line
# torch's C++ INFO lines (TORCH_CPP_LOG_LEVEL=INFO): `[I1122 20:26:58.941547227 file.cpp:710]`;
# torchrun's own Python INFO lines (`I1122 20:38:52.899000 24270 ...api.py:942]`) report decisions
# such as a restart, and stay.
_GLOG_INFO = re.compile(r"^\s*\[I\d{4} \d\d:\d\d:\d\d")
# NCCL's INFO lines that report a choice it made (`NCCL INFO Bootstrap : Using eth0:172.17.0.3<0>`):
# a signature on one names the setting behind a failure, never the failure itself.
_NCCL_SETTING = re.compile(r"^\s*NCCL INFO (?:Bootstrap|NET/Socket|NET/IB) : Using ")
# glog WARNING lines: `[W1104 01:29:53.26 ...]`, `W1122 20:20:46.66 ...`, and older torch's `[W socket.cpp:436]`.
_WARNING_LEVEL = re.compile(r"^\s*\[?W(\d{4} \d\d:\d\d:\d\d| [\w.]+:\d+\])")
OWN_ERROR_KINDS = ("exception", "terminate", "abort", "warn", "detail")


@dataclass(frozen=True)
class Event:
    """A line the scan noticed: a signature hit, an exit report or an error."""

    kind: str  # "hit" | "exit" | one of OWN_ERROR_KINDS
    source: int  # index into Scan.sources
    line: int  # 1-based
    rank: int | None
    time: float | None  # from the line's own timestamp
    text: str  # the line without its rank prefix, shortened
    entry_id: str = ""  # hits: the entry
    weight: float = 0.0  # hits: the signature's weight
    echo: bool = False  # the line echoes another failure (the signature says so, or the rules do)
    note: str = ""  # hits: the signature's note; exceptions: the exception name; terminate: the type
    exit_code: int | None = None  # exits
    role: str = (
        ""  # hits: "frame" | "umbrella" | "info" (not a cause by its form), "warning" (a weaker cause)
    )
    collective: str = ""  # exceptions: the collective the rank's traceback was blocked in
    refused: bool = False  # exceptions: torch's own check refused the call (blocks.Block.refused)
    native_check: bool = False  # exceptions: a C++ value or type check refused it (native_checks.py)
    several: bool = False  # hits: the line names the entry only when several processes show (single.py)

    @property
    def real(self) -> bool:
        """A rank's own failure, as opposed to an echo of someone else's."""
        if self.echo:
            return False
        if self.kind == "hit":
            return True
        if self.kind == "exit":
            if self.exit_code == SIGTERM_EXIT:
                return self.note == OUTSIDE_SIGTERM  # not the launcher's own teardown
            return self.exit_code not in (None, 0)
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
    ranks_seen: set[int] = field(default_factory=set)  # at most MAX_RANKS of them
    ranks_untracked: int = 0  # lines that named a rank past the first MAX_RANKS
    root_cause_rank: int | None = None  # the rank torchrun's summary calls the root cause
    no_other_failures: bool = False  # torchrun's summary: every other worker ended well
    launcher_stopped: bool = False  # torchrun's summary: the other workers ended by its SIGTERM
    spawn_failed: int | None = None  # the process mp.spawn reports failed (the first to)
    spawn_stopped: int = 0  # processes mp.spawn terminated, still running when one failed
    # torchrun started the workers again: (source, its first failure report, the next one)
    restarted: tuple[int, int, int] | None = None
    ranks: RankReader = field(default_factory=RankReader)  # traceback blocks and wait points
    gpus: dict[tuple[str, str], set[int]] = field(default_factory=dict)  # (host, busId) -> ranks on it
    heads: list[str] = field(default_factory=list)  # the start of each source, for the fallback


class Scanner:
    """Feed it lines or blocks; read `scan` when done."""

    def __init__(self, signatures: SignatureSet) -> None:
        self.signatures = signatures
        self.scan = Scan()
        self._anchor_items = sorted(signatures.by_anchor.items())
        self._current: tuple[int | None, float | None] = (None, None)
        self._frame_at: dict[tuple[int, int | None], int] = {}  # (source, rank) -> last frame line
        self._torch_frame_at: dict[int, int] = {}  # source -> its last frame line in torch's code
        self._kept: dict[tuple[str, str, int | None], int] = {}  # events kept per key
        # (source, shape_key) -> (times read in full, hits it gave)
        self._repeats: dict[tuple[int, bytes], tuple[int, int]] = {}
        self._found_count = 0
        self._redacted = ("", "")  # the last text redacted, and the result
        self._structure = Structure(self._found)
        self.scan.ranks = self._structure.reader
        self.scan.gpus = self._structure.gpus
        self._source_rank: dict[int, int | None] = {}

    def source(self, name: str) -> int:
        """Register a source (file name or `<stdin>`); returns its index for feed calls."""
        self.scan.sources.append(name)
        self.scan.heads.append("")
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
            self._keep_head(source, text + "\n")
            lowered = text.lower() + "\n"
            if (
                self.signatures.unanchored
                or any(a in lowered for a in anchors)
                or self.wants_line(source, number)
            ):
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
        self.keep_head(source, block)
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
                    if end + 1 < len(block) and (
                        needle == _LAST_ERROR
                        or (needle in _MESSAGE_BELOW and not lowered[position + len(needle) : end].strip())
                        or (needle == _FRAME_ANCHOR and torch_frame(lowered[start:end]))
                    ):
                        starts.add(end + 1)  # the line that names the cause, or the message
                    position = lowered.find(needle, end + 1)
        counted_to, number = 0, first_line
        for start in sorted(starts):
            number += block.count(b"\n", counted_to, start)
            counted_to = start
            end = block.find(b"\n", start)
            raw = block[start:] if end == -1 else block[start:end]
            key = shape_key(raw)
            if not self.repeated(source, key):
                self.feed_candidate(source, number, raw.decode("utf-8", "replace").rstrip("\r"), key)
        return lines_in_block

    def repeated(self, source: int, key: bytes) -> bool:
        """Whether a candidate line of this shape (`shape_key`) was already read in full REPEATS
        times: then it is only counted, with the hits it gave (a log where every line is a hit)."""
        seen = self._repeats.get((source, key))
        if seen is None or seen[0] < REPEATS:
            return False
        self.scan.candidates += 1
        self.scan.hits += seen[1]
        self.scan.hit_lines += 1 if seen[1] else 0
        return True

    # -- one candidate line --------------------------------------------------------------

    def feed_candidate(self, source: int, number: int, line: str, key: bytes | None = None) -> None:
        """Match one line that passed the prefilter against the signatures and the parsers (a
        paste's lines run together into one are read one by one: flattened.py).

        `key` is the line's shape_key when the caller checked `repeated` with it already."""
        pieces = split_flattened(line)
        if pieces is None:
            self._candidate(source, number, line, key)
            return
        for piece in pieces:
            self._candidate(source, number, piece)

    def _candidate(self, source: int, number: int, line: str, key: bytes | None = None) -> None:
        if key is None:
            key = shape_key(line.encode("utf-8", "replace"))
            if self.repeated(source, key):
                return
        if "\x1b" in line:
            line = clean(line)  # colour codes would split the words a signature looks for
        split = split_prefix(line)
        body = split.body
        rank = split.rank
        if rank is None:
            rank = self._source_rank.get(source)
        if rank is None:
            rank = rank_in_message(body)
        if rank is None:
            rank = self._structure.summary_rank(source, number, line)
        if rank is None:
            rank = self._structure.spawn_rank(source)
        named, rank = rank, self._tracked(rank)
        if named is not None and rank is None:
            # A rank past MAX_RANKS: untracked ranks' lines share one shape, whatever rank they name.
            key = b"\0" + body.encode("utf-8", "replace").translate(_DIGITS)
            if self.repeated(source, key):
                return
        self.scan.candidates += 1
        found_before = self._found_count
        when = timestamp(line)
        short = body.strip()[:RAW_TEXT]
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

        matched = False
        role = ""
        hits_before = self.scan.hits
        if _FRAME_LINE.match(body):
            if not _NO_SOURCE_FRAME.match(body):
                self._frame_at[(source, rank)] = number
                if torch_frame(lowered.encode("utf-8", "replace")):
                    self._torch_frame_at[source] = number  # the call quoted below is read (wants_line)
            role = "frame"
        elif self._frame_at.get((source, rank)) == number - 1 and not _EXCEPTION_LINE.match(body):
            role = "frame"  # the source line a traceback prints under its frame
        elif is_source_line(body):
            role = "frame"  # the same, when the paste lost the frame above it
        elif UMBRELLA.search(body):
            role = "umbrella"
        elif _GLOG_INFO.match(body) or _NCCL_SETTING.match(body):
            role = "info"  # progress or a setting, not failure
        elif _WARNING_LEVEL.match(body):
            role = "warning"  # a warning: it names a cause, but an error printed with it comes first
        for position in candidates:
            item = self.signatures.signatures[position]
            if item.search(body) or (body is not line and item.search(line)):
                sig = item.signature
                self.scan.hits += 1
                self._add(
                    Event(
                        "hit",
                        source,
                        number,
                        rank,
                        when,
                        short,
                        item.entry_id,
                        sig.weight,
                        sig.echo,
                        sig.note,
                        role=role,
                        several=sig.several,
                    )
                )
                matched = matched or sig.echo or sig.weight >= SUBSTANTIVE_WEIGHT
        if self.scan.hits > hits_before:
            self.scan.hit_lines += 1
        self._current = (rank, when)
        if role != "info":
            self._structure.feed(source, number, rank, split.host, body, short, matched and role != "frame")
            self.scan.root_cause_rank = self._structure.root_cause_rank
            self.scan.no_other_failures = self._structure.no_other_failures
            self.scan.launcher_stopped = self._structure.launcher_stopped_others
            self.scan.spawn_failed = self._structure.spawn_failed
            self.scan.spawn_stopped = self._structure.spawn_stopped
            self.scan.restarted = self._structure.restarted
        if role == "" and self._found_count == found_before and not _STRUCTURAL.search(lowered):
            # Only a line that fed nothing but hits may be skipped when it repeats.
            if len(self._repeats) >= MAX_SHAPES:
                self._repeats.clear()
            seen = self._repeats.get((source, key), (0, 0))
            self._repeats[(source, key)] = (seen[0] + 1, self.scan.hits - hits_before)

    def _found(self, source: int, number: int, found: Found) -> None:
        """An event from the structure reader, on the line being scanned."""
        self._found_count += 1
        _, when = self._current
        self._add(
            Event(
                found.kind,
                source,
                number,
                self._tracked(found.rank),
                when,
                found.text[:RAW_TEXT],
                note=found.note,
                exit_code=found.exit_code,
                collective=found.collective,
                refused=found.refused,
                native_check=found.native_check,
            )
        )

    def wants_line(self, source: int, number: int) -> bool:
        """Whether a line without an anchor must still be read (the cause after `Last error:`, the
        call quoted under a frame in torch's code)."""
        return (
            self._structure.wants_next_line(source, number - 1)
            or self._torch_frame_at.get(source) == number - 1
        )

    def keep_head(self, source: int, data: bytes) -> None:
        """Keep the start of a source for the fallback to the query engine."""
        have = len(self.scan.heads[source])
        if have < MAX_HEAD:
            self.scan.heads[source] += data[: MAX_HEAD - have].decode("utf-8", "replace")

    def _keep_head(self, source: int, text: str) -> None:
        have = len(self.scan.heads[source])
        if have < MAX_HEAD:
            self.scan.heads[source] += text[: MAX_HEAD - have]

    def finish(self) -> Scan:
        """Close the blocks still open (a log that ends inside a traceback); returns the scan."""
        self._structure.reader.finish()
        return self.scan

    def _tracked(self, rank: int | None) -> int | None:
        """`rank`, or None past the first MAX_RANKS ranks (per-rank state stays bounded)."""
        if rank is None or rank in self.scan.ranks_seen:
            return rank
        if len(self.scan.ranks_seen) < MAX_RANKS:
            self.scan.ranks_seen.add(rank)
            return rank
        self.scan.ranks_untracked += 1
        return None

    def _add(self, event: Event) -> None:
        key = (event.kind, event.entry_id, event.rank)
        kept = self._kept.get(key, 0)
        if (kept < MAX_PER_KEY and len(self.scan.events) < MAX_EVENTS) or not kept:
            self._kept[key] = kept + 1
            # Redacted before it is cut, and only for the events kept: a hit on every line of a
            # huge log costs no redaction past the first few thousand.
            if event.text != self._redacted[0]:  # the events of one line share its text
                self._redacted = (event.text, redact_text(event.text)[:MAX_TEXT])
            self.scan.events.append(replace(event, text=self._redacted[1]))
        else:
            self.scan.dropped += 1


def shape_key(raw: bytes) -> bytes:
    """A line with its numbers zeroed, except in its first SHAPE_PREFIX bytes, where the rank
    prefix is (`[default3]:`, `[rank3]:`, `3: `): two lines with one key come from one rank and
    differ only in numbers (a step, a time). C-speed: it runs on every candidate line."""
    return raw[:SHAPE_PREFIX] + raw[SHAPE_PREFIX:].translate(_DIGITS)


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
        scanner.feed_lines(indexes[name], [text], number)
    return scanner.finish()


__all__ = ["STRUCTURAL_ANCHORS", "Event", "Scan", "Scanner", "scan_lines"]
