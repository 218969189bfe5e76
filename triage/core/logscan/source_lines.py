"""A line of Python source code, as a traceback quotes it under a frame.

A traceback prints each frame (`File "x.py", line 3, in f`) and under it the line of code it was
running. The scanner knows that line for what it is when the frame came just before it; but a
paste often starts in the middle of a traceback, or a rank prefix splits the frame from its code,
and the code line then stands alone. It still says only where a rank was (`with
training_args.main_process_first(...)`, `work = group.barrier(opts=opts)`), never why it failed:
a signature that matches it is context, as it is for the frame.

The shapes are Python's statements as tracebacks indent them: a keyword statement, an
assignment, a bare call. A message line (`RuntimeError: ...`, `NCCL WARN ...`, torchrun's
`  rank      : 1`) has none of those shapes.
"""

from __future__ import annotations

import re

_NAME = r"[A-Za-z_][\w.]*(?:\[[^\]]{0,80}\])?"
_SOURCE = re.compile(
    r"^\s{4,}(?:"
    r"(?:with|return|for|if|elif|while|raise|assert|yield|await|del)\s\S"  # a keyword statement
    rf"|{_NAME}(?:\s*,\s*{_NAME}){{0,5}}\s*[-+*/|&]?=\s*[\w(\[{{'\"-]"  # an assignment
    rf"|{_NAME}\(.*\)\s*$"  # a bare call
    r")"
)
# A message that happens to be indented: an exception's name and text, NCCL's levels.
_MESSAGE = re.compile(r"(?:Error|Exception|Warning|Interrupt)\b\s*:|\bNCCL (?:WARN|INFO)\b")


def is_source_line(body: str) -> bool:
    """Whether a line (its rank prefix removed) is a line of Python code a traceback quotes."""
    return _SOURCE.match(body) is not None and _MESSAGE.search(body) is None
