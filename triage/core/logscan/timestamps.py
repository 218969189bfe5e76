"""Timestamps in log lines, turned into numbers that order events across ranks and files.

The formats seen in distributed PyTorch output: glog-style C++ and torchrun lines
(`E1122 04:12:07.467000 ...`, `[rank3]:[E115 15:39:38.012111423 ProcessGroupNCCL.cpp:1899]`),
ISO-like application logs (`2024-05-01 12:00:00,123`, `2024-05-01T12:00:00.123Z`) and torchrun's
failure summary (`time : 2026-11-22_04:12:07`). The year is ignored because glog omits it: the
number is seconds since the start of an imaginary year, enough to order one job's lines.
"""

from __future__ import annotations

import re

_GLOG = re.compile(r"(?:^|\[)[IWEF](?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d(?:\.\d+)?)\b")
_ISO = re.compile(r"\b\d{4}-(?P<mo>\d\d)-(?P<d>\d\d)[T _](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d(?:[.,]\d+)?)")


def timestamp(text: str) -> float | None:
    """Seconds (year ignored) of the first timestamp near the start of `text`, or None."""
    head = text[:120]
    # The stamp nearest the start: a collector's (kubectl, mpirun) is in front of every line, the
    # program's own only on some; one clock for all lines orders them.
    found = [m for m in (_GLOG.search(head), _ISO.search(head)) if m is not None]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    month, day = int(match["mo"]), int(match["d"])
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    seconds = float(match["s"].replace(",", "."))
    return (((month * 31 + day) * 24 + int(match["h"])) * 60 + int(match["mi"])) * 60 + seconds
