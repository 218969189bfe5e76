"""A traceback the paste cuts off before its error line: where the rank stood when it failed.

Users often paste a traceback's frames and stop before the exception (the thread's text says what
it was, or the paste was cut at a length limit). With no error line the scan finds no failure, and
the fallback would read the whole start of the log, where the job's progress lines and banners
outweigh the frames. The deepest frames still say what the rank was doing (`checkpointer.save`,
`DeepSpeedConfig._configure_train_batch_size`, `DistributedDataParallel.__init__`): they are what
the query engine reads instead.
"""

from __future__ import annotations

import re

from triage.core.logscan.heads import EXCEPTION_NAME
from triage.core.logscan.prefixes import split_prefix

DEEPEST_FRAMES = 4  # the frames nearest the failure; the outer ones are the script's main() chain
_START = re.compile(r"Traceback \(most recent call last\):")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line \d+,? in (?P<func>[\w<>.]+)')
_ERROR = re.compile(rf"^\s*{EXCEPTION_NAME}(:|\s*$)")
_MARKERS = frozenset("^~ ")  # Python 3.11+ puts carets under the failing expression


def unfinished_frames(head: str) -> str | None:
    """The deepest frames of the last traceback in `head` when no error line follows them (each
    frame as its module, function and quoted code); None when the traceback ends in an error or
    there is none."""
    lines = [split_prefix(line).body for line in head.splitlines()]
    start = max((i for i, line in enumerate(lines) if _START.search(line)), default=None)
    if start is None:
        return None
    frames: list[str] = []
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if _ERROR.match(line):
            return None
        frame = _FRAME.search(line)
        if frame is None:
            continue
        code = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if _FRAME.search(code) or set(code) <= _MARKERS:
            code = ""
        module = re.sub(r"\.py$", "", frame["file"].replace("\\", "/")).split("/")[-2:]
        frames.append(" ".join([*module, frame["func"], code]).strip())
    if not frames:
        return None
    return "\n".join(frames[-DEEPEST_FRAMES:])
