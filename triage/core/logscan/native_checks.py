"""Argument checks torch makes in C++ and raises through its Python bindings.

c10's `TORCH_CHECK_VALUE` and `TORCH_CHECK_TYPE` reach Python as ValueError and TypeError, raised by
the bound call itself: the traceback's innermost frame is torch's Python code quoting a call, not a
`raise` (`return TCPStore(` -> `ValueError: TCPStore world size cannot be 0`). As with the Python
checks (blocks._RAISE), the rank was not waiting in that call and did not diverge from the others:
every rank making the call fails the same way. A timeout or a lost peer comes from C++ as
RuntimeError (DistBackendError, DistNetworkError); a re-raise (`raise exception`, a DataLoader
worker's error) is a `raise`, so neither counts here. Weaker than a Python check, though: older
torch raised environmental failures the same way (`ValueError: host not found: Name or service not
known`), so the message keeps its signatures and its own reading; only the diverged-rank reading
and the wait point are withdrawn (rules.py, blocks.RankReader._keep).
"""

from __future__ import annotations

import re

# The classes the C++ value and type checks map to.
NATIVE_CHECK_CLASSES = frozenset({"ValueError", "TypeError"})
# A quoted source line that calls something (`return TCPStore(`, `store = _create_c10d_store(`,
# `self._impl.set(key, value)`), and is no raise.
_CALL = re.compile(r"^(?!\s*raise\b)\s*[^#]*\b[A-Za-z_][\w.]*\(")


def is_call(source_line: str) -> bool:
    """The source line a traceback quotes under a frame makes a call (and raises nothing itself)."""
    return _CALL.match(source_line) is not None


def native_refusal(exception_class: str, innermost_quotes_call: bool) -> bool:
    """An exception of this class, with torch's innermost frame quoting a call: a C++ argument check."""
    return innermost_quotes_call and exception_class in NATIVE_CHECK_CLASSES


# A traceback frame in torch's own code (a lower-cased line): the scanner reads the line below it,
# the call it quotes, even when that line holds none of the anchors.
_TORCH_FRAME = re.compile(rb'file "[^"]*[/\\]torch[/\\]')


def torch_frame(lowered_line: bytes) -> bool:
    """The (lower-cased) line is a traceback frame in torch's own code."""
    return _TORCH_FRAME.search(lowered_line) is not None
