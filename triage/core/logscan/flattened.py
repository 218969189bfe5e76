"""A paste that lost its newlines: the lines of a log run together into one, read apart again.

Forums, chat and some issue forms turn a pasted log into one long line (`[rank0]: Traceback (most
recent call last): [rank0]: File "train.py", line 3, in <module> ... RuntimeError: ...`). Read as one
line, its rank prefixes after the first are lost and its error lines are not where a line starts.
A long line holding several of the marks that only start a log line (a rank prefix, a traceback's
header or frame, a glog or NCCL prefix, an exception's name after a space) is split before each;
the pieces keep the line's number.
"""

from __future__ import annotations

import re

MIN_CHARS = 400  # shorter lines are lines, however many marks they hold
MAX_CHARS = 1 << 16  # a paste is shorter: a longer line is read as one, around its anchors
MIN_MARKS = 3
_MARK = re.compile(
    r"(?<=\s)(?:"
    r"\[(?:rank|default)\d{1,6}\]:"  # torch's and torchrun's rank prefixes
    r"|Traceback \(most recent call last\):"
    r"|File \"[^\"]{1,300}\", line \d+"
    r"|\[?[IWEF]\d{4} \d\d:\d\d:\d\d"  # glog: torch's C++ and Python loggers
    r"|[\w.-]{1,64}:\d+:\d+ \[\d{1,4}\] NCCL "  # NCCL's host:pid:tid [device]
    r"|(?:[A-Za-z_]\w*\.){0,8}[A-Z]\w*(?:Error|Exception): "  # an exception's name, then its message
    r")"
)


_PREFIX_ONLY = re.compile(r"(?:\[(?:rank|default)\d{1,6}\]:)+")


def split_flattened(line: str) -> list[str] | None:
    """The log lines a long line ran together, or None when it is one line."""
    if not MIN_CHARS <= len(line) <= MAX_CHARS:
        return None
    starts = [m.start() for m in _MARK.finditer(line)]
    if len(starts) < MIN_MARKS:
        return None
    pieces: list[str] = []
    held = ""  # a rank prefix stays with the line it starts
    for a, b in zip([0, *starts], [*starts, len(line)], strict=True):
        piece = line[a:b].strip()
        if _PREFIX_ONLY.fullmatch(piece):
            held += piece
        elif piece:
            pieces.append(f"{held}{' ' if held else ''}{piece}")
            held = ""
    return pieces + ([held] if held else [])
