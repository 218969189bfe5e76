"""The user's source files, read once per call, for the context of the lines the ranks are stuck on.

Shared by every way of getting a stack (py-spy, the debug server, Flight Recorder frames): the core
gets a `LineContext` per user frame and never touches the disk itself.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable

from triage.core.hang.classify import is_library
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import Frame, LineContext

MAX_SOURCE_BYTES = 4 << 20


class Sources:
    """A cache of source files: text, or None for a file that is missing, huge or not regular."""

    def __init__(self) -> None:
        self._text: dict[str, str | None] = {}
        self._lock = threading.Lock()

    def text(self, path: str) -> str | None:
        with self._lock:
            if path in self._text:
                return self._text[path]
        value: str | None = None
        try:
            # A FIFO or a device named like a source file must never block the probe.
            if stat.S_ISREG(os.stat(path).st_mode):
                with open(path, "rb") as handle:
                    data = handle.read(MAX_SOURCE_BYTES + 1)
                if len(data) <= MAX_SOURCE_BYTES:
                    value = data.decode("utf-8", errors="replace")
        except OSError:
            value = None
        with self._lock:
            self._text[path] = value
        return value

    def contexts(self, frames: Iterable[Frame]) -> dict[str, LineContext]:
        """The context of every user frame whose file can be read ("file:line" -> context)."""
        found: dict[str, LineContext] = {}
        for frame in frames:
            if not is_library(frame.file) and frame.where() not in found:
                text = self.text(frame.file)
                if text is not None:
                    found[frame.where()] = line_context(text, frame.line)
        return found
