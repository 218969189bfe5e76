"""Drawing pre-parsed Markdown (see triage.kb.markdown_ast) on a terminal, styled or plain.

Styled output uses ANSI escapes when stdout is a terminal and NO_COLOR is unset; plain output
keeps code spans in backticks so commands stay copyable. No markdown-it import here: the blocks
were parsed when the knowledge was compiled.
"""

from __future__ import annotations

import os
import sys
import textwrap
from typing import Any, NamedTuple, TextIO

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
DIM = "\x1b[2m"
ITALIC = "\x1b[3m"
UNDERLINE = "\x1b[4m"
CYAN = "\x1b[36m"
YELLOW = "\x1b[33m"
GREEN = "\x1b[32m"
RED = "\x1b[31m"
BLUE = "\x1b[34m"


class Style(NamedTuple):
    """How to write to the terminal: with colour or not, and how wide."""

    color: bool
    width: int

    def paint(self, text: str, *codes: str) -> str:
        if not self.color or not codes:
            return text
        return "".join(codes) + text + RESET


def style_for(stream: TextIO | None = None) -> Style:
    """Colour only for a terminal without NO_COLOR; wrap to the terminal (or 100 columns when piped)."""
    stream = stream or sys.stdout
    is_tty = hasattr(stream, "isatty") and stream.isatty()
    color = is_tty and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"
    width = 100
    if is_tty:  # os, not shutil: shutil's import pulls in the compression modules
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError):
            width = 100
    return Style(color=color, width=max(40, min(width, 120)))


def _inline(spans: list[Any], style: Style) -> str:
    out = []
    for span in spans:
        kind = span[0]
        if kind == "text":
            out.append(span[1])
        elif kind == "code":
            out.append(style.paint(span[1], CYAN) if style.color else f"`{span[1]}`")
        elif kind == "strong":
            out.append(style.paint(_inline(span[1], style), BOLD))
        elif kind == "em":
            out.append(style.paint(_inline(span[1], style), ITALIC))
        elif kind == "link":
            label = _inline(span[2], style)
            href = span[1]
            out.append(label if href in (label, "") else f"{label} ({style.paint(href, BLUE, UNDERLINE)})")
        elif kind == "br":
            out.append("\n")
    return "".join(out)


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    lines: list[str] = []
    first_prefix = indent if first is None else first
    for n, para in enumerate(text.split("\n")):
        wrapped = textwrap.wrap(
            para,
            width=width,
            initial_indent=first_prefix if n == 0 else indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
        lines.extend(wrapped or [indent.rstrip()])
    return lines


def render_blocks(blocks: list[dict[str, Any]], style: Style, indent: str = "") -> list[str]:
    """Markdown blocks to terminal lines."""
    lines: list[str] = []
    for block in blocks:
        kind = block["t"]
        if lines and kind != "hr":
            lines.append("")
        if kind == "p":
            lines += _wrap(_inline(block["c"], style), style.width, indent)
        elif kind == "h":
            lines.append(indent + style.paint(_inline(block["c"], style), BOLD))
        elif kind == "code":
            for line in block["text"].rstrip("\n").split("\n"):
                lines.append(indent + "    " + style.paint(line, GREEN))
        elif kind in ("ul", "ol"):
            number = int(block.get("start", 1))
            for item in block["items"]:
                bullet = f"{number}. " if kind == "ol" else "- "
                number += 1
                body = render_blocks(item, style, indent + " " * len(bullet))
                while body and body[0] == "":
                    body.pop(0)
                if body:
                    first = body[0]
                    body[0] = indent + bullet + first[len(indent) + len(bullet) :]
                lines += body
        elif kind == "quote":
            inner = render_blocks(block["c"], style, indent + "| ")
            lines += inner
        elif kind == "table":
            lines += _table(block, style, indent)
        elif kind == "hr":
            lines.append(indent + "-" * min(40, style.width))
    return lines


def _table(block: dict[str, Any], style: Style, indent: str) -> list[str]:
    head = [_inline(cell, Style(False, style.width)) for cell in block["head"]]
    rows = [[_inline(cell, Style(False, style.width)) for cell in row] for row in block["rows"]]
    columns = max([len(head), *(len(r) for r in rows)])
    widths = [0] * columns
    for row in [head, *rows]:
        for i, cell in enumerate(row):
            widths[i] = min(max(widths[i], len(cell)), 60)
    out = []
    if head:
        out.append(indent + "  ".join(style.paint(c.ljust(widths[i]), BOLD) for i, c in enumerate(head)))
        out.append(indent + "  ".join("-" * w for w in widths))
    for row in rows:
        out.append(indent + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
    return out


def heading(text: str, style: Style) -> str:
    """A heading, underlined when colour is on."""
    return style.paint(text, BOLD, UNDERLINE) if style.color else text


def banner(needed: bool, title: str, text: str, style: Style) -> list[str]:
    """The verification note, impossible to miss when the fix changes the science of the run."""
    painted = style.paint(f"!! {title}", BOLD, YELLOW) if needed else style.paint(title, GREEN)
    return [painted, *_wrap(text, style.width, "   ")]
