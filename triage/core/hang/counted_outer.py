"""Whether running out of data can explain a rank's leaving a block early.

A rank that left a `with` (or `try`) body while the others are still in a loop over the data in
it may have run out of data first (D9), or raised (D20). Where that data loop sits in a counted
loop (`for epoch in range(1, 6)`) that the busy ranks are still part-way through (their counter,
read from py-spy's locals, short of the bound's last value), running out of data would have sent
the early rank round the counted loop again, not out of it: only an exception is left.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from triage.core.hang.stacks import LineContext

_RANGE = re.compile(r"^for \w+ in range\(")


def counted_around_data(
    deeper: Sequence[tuple[object, LineContext]], data_header: Callable[[str], bool]
) -> bool:
    """Whether, on a rank's frames past the parting point (`deeper`, outermost first), a counted
    loop (`for epoch in range(...)`) encloses a loop over the data (`data_header(header)`)."""
    headers = [header for _, ctx in deeper for _, _, header in ctx.blocks if not header.startswith("if ")]
    first = next((i for i, h in enumerate(headers) if _RANGE.match(h)), None)
    return first is not None and any(data_header(h) for h in headers[first + 1 :])
