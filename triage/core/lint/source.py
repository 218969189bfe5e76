"""The text of a file as this lint reads it: bytes decoded as Python source (UTF-8 or its coding
line), parsed into a tree, or one `SourceError` line naming the file and what is wrong with it
(binary, too large, not UTF-8, a syntax error)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings

from triage.core.errors import UserError

MAX_SOURCE_CHARS = 5_000_000  # larger than any training script; refuse generated blobs


class SourceError(UserError):
    """The input is not Python this lint can read: one line naming the file (and line)."""

    def __init__(self, path: str, problem: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line


_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)


def decode_source(data: bytes, path: str) -> str:
    """The text of a script's bytes (UTF-8, or the encoding its PEP 263 coding line names)."""
    if len(data) > MAX_SOURCE_CHARS:
        raise SourceError(path, f"{len(data):,} bytes, too large to be a training script")
    if b"\x00" in data:
        raise SourceError(path, "a binary file, not Python source")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})"
    if _CODING.search(b"\n".join(data.split(b"\n", 2)[:2])):
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            return data.decode(encoding)
        except (SyntaxError, UnicodeDecodeError, LookupError):
            pass
    raise SourceError(path, problem)


def parse(source: str, path: str) -> ast.Module:
    """The syntax tree, or a SourceError naming the file and line."""
    if len(source) > MAX_SOURCE_CHARS:
        raise SourceError(path, f"{len(source):,} characters, too large to be a training script")
    if "\x00" in source:
        raise SourceError(path, "a binary file, not Python source")
    try:
        with warnings.catch_warnings():  # `"\:"` in the user's file is not ours to report
            warnings.simplefilter("ignore")
            return ast.parse(source, filename=path)
    except SyntaxError as exc:
        return _syntax_error(path, exc)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise SourceError(path, f"cannot be parsed as Python ({type(exc).__name__})") from None


def _syntax_error(path: str, exc: SyntaxError) -> ast.Module:
    raise SourceError(path, f"syntax error: {exc.msg}", exc.lineno) from None
