"""A failed `assert`: the statement that raised names the check, the AssertionError only that it failed.

Python prints the source line of the frame that raised just above the exception. For most errors
that line is where a rank was (a collective, a library call) and the exception says why; for an
AssertionError it is the other way round: the message is whatever the author wrote (often nothing),
and the asserted expression is the check that failed. When a signature matches that statement
(`assert torch.equal(...)`: an exact comparison of floating-point results, P9), it explains the
failure, over the rule that only says one rank failed first (rules.DIVERGED_SCORE).
"""

from __future__ import annotations

from triage.core.logscan.rules import Inferred
from triage.core.logscan.scanner import Event

ASSERTED_SCORE = 0.95
_REACH = 3  # lines between the statement and the exception: Python 3.11's carets, a wrapped message


def failed_assertion(events: list[Event], first: Event) -> Inferred | None:
    """The entry whose signature matches the statement of the assert that failed first."""
    if first.kind != "exception" or not first.note.endswith("AssertionError"):
        return None
    statements = [
        e
        for e in events
        if e.kind == "hit"
        and e.role == "frame"
        and e.source == first.source
        and e.rank == first.rank
        and first.line - _REACH <= e.line < first.line
        and e.text.lstrip().startswith("assert ")
    ]
    if not statements:
        return None
    statement = statements[-1]
    reason = f"the assert that failed checks `{statement.text.strip()[:120]}`"
    return Inferred(statement.entry_id, ASSERTED_SCORE, (first, statement), reason, True)
