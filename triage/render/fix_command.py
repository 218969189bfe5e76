"""The first command of a fix: what the TUI's `c` copies and the report puts under "Try first".

Read from the parsed Markdown the knowledge base carries: the first code block of the fix (its first
shell command, for a shell snippet), else its first inline code span.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from triage.core.model import Entry, KnowledgeBase

SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "zsh", "sh-session"})
_ALIGNED_COMMENT = re.compile(r"\s{2,}#.*$")


def first_command(kb: KnowledgeBase, entry: Entry) -> str | None:
    """The first code block of the fix (the command or snippet to try first), else its first inline
    code span; read from the parsed Markdown the knowledge base carries."""
    blocks = kb.docs.get(entry.id, {}).get("fix")
    if blocks is None:
        from triage.kb import markdown_ast

        blocks = markdown_ast.parse(entry.fix)
    code = _first(blocks, "code")
    if code is not None:
        text = str(code["text"])
        if str(code.get("lang", "")).lower() in SHELL_LANGUAGES:
            command = first_shell_command(text)
            if command:
                return command
        return text.strip() or None
    span = _first_span(blocks)
    return span.strip() if span else None


def first_shell_command(text: str) -> str | None:
    """The first command of a shell snippet: comments and prompts dropped, continuations joined,
    an aligned trailing comment (two or more spaces, then #) removed."""
    parts: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not parts and (not line or line.startswith("#")):
            continue
        if line.startswith("$ "):
            line = line[2:]
        line = _ALIGNED_COMMENT.sub("", line)
        if line.endswith("\\"):
            parts.append(line[:-1].rstrip())
            continue
        parts.append(line)
        break
    return " ".join(p for p in parts if p) or None


def _first(blocks: Sequence[Any], kind: str) -> dict[str, Any] | None:
    for block in blocks:
        if block.get("t") == kind:
            return dict(block)
        children: list[Any] = []
        if block.get("t") in ("ul", "ol"):
            for item in block["items"]:
                children.extend(item)
        elif block.get("t") == "quote":
            children = list(block["c"])
        found = _first(children, kind)
        if found is not None:
            return found
    return None


def _first_span(blocks: Sequence[Any]) -> str | None:
    def spans(items: Sequence[Any]) -> str | None:
        for span in items:
            if span[0] == "code":
                return str(span[1])
            if span[0] in ("strong", "em"):
                found = spans(span[1])
            elif span[0] == "link":
                found = spans(span[2])
            else:
                found = None
            if found:
                return found
        return None

    for block in blocks:
        if block.get("t") in ("p", "h"):
            found = spans(block["c"])
            if found:
                return found
        elif block.get("t") in ("ul", "ol"):
            for item in block["items"]:
                found = _first_span(item)
                if found:
                    return found
        elif block.get("t") == "quote":
            found = _first_span(block["c"])
            if found:
                return found
    return None
