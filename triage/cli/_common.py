"""Helpers shared by the command modules (input limits, id lookup, JSON shapes, printing)."""

from __future__ import annotations

import sys
from typing import Any

from triage.core.errors import UserError, shown
from triage.core.model import Entry, KnowledgeBase, to_plain

MAX_STDIN_BYTES = 1_000_000


def read_stdin_text(limit: int = MAX_STDIN_BYTES, hint: str = "") -> str:
    """All of stdin as UTF-8 text, refusing more than `limit` bytes or invalid UTF-8 in one line."""
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise UserError(f"input on stdin is larger than {limit // 1_000_000} MB{hint}")
    return decode_utf8(data, "input on stdin")


def decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None


def check_argv_text(text: str) -> str:
    """Arguments with bytes that are not UTF-8 arrive as lone surrogates; refuse them cleanly."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UserError(f"the query is not UTF-8 text (position {exc.start})") from None
    return text


def require_entry(kb: KnowledgeBase, raw_id: str) -> Entry:
    entry = kb.entry(raw_id)
    if entry is None:
        prefixes: dict[str, list[int]] = {}
        for entry_id in kb.entries:
            prefix = entry_id.rstrip("0123456789")
            prefixes.setdefault(prefix, []).append(int(entry_id[len(prefix) :]))
        known = ", ".join(
            f"{p}{min(n)}-{p}{max(n)}" if len(n) > 1 else f"{p}{n[0]}" for p, n in prefixes.items()
        )
        raise UserError(f"unknown entry id {shown(raw_id)}; known ids: {known} (see `triage list`)")
    return entry


def entry_json(kb: KnowledgeBase, entry: Entry) -> dict[str, Any]:
    data = to_plain(entry)
    assert isinstance(data, dict)
    data["section_title"] = kb.section_title(entry.section)
    data["covered"] = entry.covered
    return data


def print_lines(lines: list[str]) -> None:
    sys.stdout.write("\n".join(lines) + "\n")


def read_text_file(path: str, limit: int = MAX_STDIN_BYTES) -> str:
    """A regular file's text: refuses a missing path, a directory, a FIFO or device, a file over
    `limit` bytes and bytes that are not UTF-8, each in one line (never blocks on a FIFO)."""
    import os
    import stat

    try:
        info = os.stat(path)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror.lower() if exc.strerror else 'cannot be read'}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise UserError(f"{path}: {kind}")
    if info.st_size > limit:
        raise UserError(f"{path}: larger than {limit // 1_000_000} MB")
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror.lower() if exc.strerror else 'cannot be read'}") from None
    return decode_utf8(data, path)
