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

from triage.core.logscan.blocks import FRAME
from triage.core.logscan.prefixes import split_prefix

DEEPEST_FRAMES = 4  # the frames nearest the failure; the outer ones are the script's main() chain
_START = re.compile(r"Traceback \(most recent call last\):")
_MARKERS = frozenset("^~ ")  # Python 3.11+ puts carets under the failing expression
# an exception's line: its (dotted) class name, then its message or nothing (`Exception: process 1
# terminated with signal SIGSEGV`, a bare `KeyboardInterrupt`); never the code a frame quotes
_ERROR = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(:\s.*|:)?$")


def unfinished_frames(head: str) -> str | None:
    """The deepest frames of the last traceback in `head` when the paste ends inside them (each
    frame as its module, function and quoted code); None when anything follows the last frame's
    code (its error line, whatever the exception's name) or there is no traceback."""
    lines = [split_prefix(line).body.strip() for line in head.splitlines()]
    start = max((i for i, line in enumerate(lines) if _START.search(line)), default=None)
    if start is None:
        return None
    frames: list[list[str]] = []
    code_due = False  # the line after a frame is the code it quotes
    for line in lines[start + 1 :]:
        frame = FRAME.match(line)
        if frame is not None:
            module = re.sub(r"\.py$", "", frame["file"].replace("\\", "/")).split("/")[-2:]
            frames.append([*module, frame["func"]])
            code_due = True
        elif not line or set(line) <= _MARKERS:
            continue
        elif _ERROR.match(line):
            return None
        elif code_due and frames:
            frames[-1].append(line)
            code_due = False
        elif frames:
            return None  # the traceback went on past its frames: to its error line
    if not frames:
        return None
    return "\n".join(" ".join(frame) for frame in frames[-DEEPEST_FRAMES:])
