"""Rules about whole files: they read, parse, have the right top level, and repeat no key."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from triage.kb.rules.context import Context
from triage.kb.rules.registry import Finding, rule
from triage.kb.schema import FILES
from triage.kb.sources import SourceFile


@rule(
    "KB000",
    "file-parses",
    finds="a knowledge file that is missing, unreadable, not UTF-8, or not valid YAML",
    why="nothing in the file can be checked or used until it parses",
    fix="correct the file so it parses as YAML",
)
def file_parses(ctx: Context) -> Iterator[Finding]:
    """Report a knowledge file that is missing, unreadable, not UTF-8, or not valid YAML."""
    for src in ctx.sources.all_files():
        if src.error is not None:
            yield Finding(src, src.error_line, "", src.error)


@rule(
    "KB000",
    "top-level-type",
    finds="a file whose top level is not the mapping or list its kind of file holds",
    why="the loader reads each file by its layout; another layout would be silently misread",
    fix="see knowledge/README.md for the layout of each file",
)
def top_level_type(ctx: Context) -> Iterator[Finding]:
    """Report a file whose top level is not the mapping or list its kind of file holds."""
    for spec in FILES:
        for src in ctx.files_of(spec):
            if src.error is None and not spec.top.accepts(src.data):
                yield Finding(src, 1, "", f"top level must be {spec.top.expected}")


@rule(
    "KB017",
    "duplicate-key",
    finds="a key given twice in the same mapping",
    why="YAML silently keeps the last value, so the first one is lost without a word",
    fix="keep one; YAML silently keeps the last",
)
def duplicate_key(ctx: Context) -> Iterator[Finding]:
    """Report a key given twice in the same mapping."""
    for src in ctx.sources.all_files():
        if src.error is None:
            yield from _duplicates(src, src.data)


def _duplicates(src: SourceFile, data: Any) -> Iterator[Finding]:
    if isinstance(data, dict):
        for key, line in getattr(data, "duplicates", []):
            yield Finding(src, line, str(key), "is given twice in the same mapping")
        for value in data.values():
            yield from _duplicates(src, value)
    elif isinstance(data, list):
        for value in data:
            yield from _duplicates(src, value)
