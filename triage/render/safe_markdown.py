"""Markdown from the knowledge made safe for someone else's renderer (MkDocs, MyST, a Markdown
report pasted into an issue tracker).

Those renderers pass raw HTML through and turn any link into a live one, so the knowledge's
Markdown fields go through `safe_markdown`, which keeps the Markdown but takes out what could run:

- every `<` that could open an HTML tag outside code is written `&lt;`, also after a backslash
  (`\\<img ...>`: Python-Markdown does not take `\\<` as an escape), and a backtick escaped with a
  backslash does not open a code span that would hide a tag from this check (`` \\`<img>\\` ``);
- autolinks are kept only for http, https, ftp and mailto;
- a link or image whose destination is a script (javascript:, vbscript:, data:, also when written
  with entities, tabs or odd case) loses its link syntax and shows as text, as does a reference
  definition that points at one.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

_FENCE = re.compile(r"^ {0,3}(?:[-*+]\s+|\d+[.)]\s+)*\s*(`{3,}|~{3,})(.*)$")
_AUTOLINK = re.compile(r"<(?:(?:https?|ftp|mailto):[^\s<>]*|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>", re.IGNORECASE)
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")  # what could open a tag
_BACKTICKS = re.compile(r"(?<!`)(`+)(?!`)")
_LINK_DESTINATION = re.compile(r"\]\((?P<dest>[^)]{0,2048})")
_REFERENCE = re.compile(r"^(?P<indent> {0,3})\[(?P<label>[^\]]{1,999})\]:(?P<dest>.*)$")
_SCRIPT_SCHEME = re.compile(r"^(?:javascript|vbscript|livescript|data):", re.IGNORECASE)
_INVISIBLE = re.compile(r"[\x00-\x20\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff<>]")


def safe_markdown(text: str) -> str:
    """Markdown with no raw HTML and no script links outside code: what is left renders as text."""
    out: list[str] = []
    fence = ""
    for line in text.splitlines(keepends=True):
        match = _FENCE.match(line.rstrip("\n"))
        if fence:
            if _closes(match, fence):
                fence = ""
            out.append(line)
            continue
        if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            fence = match.group(1)
            out.append(line)
            continue
        out.append(_escape_inline(_defuse_reference(line)))
    return "".join(out)


def _closes(match: re.Match[str] | None, fence: str) -> bool:
    """A closing fence: the same character, at least as long, and no info string."""
    if match is None:
        return False
    run = match.group(1)
    return run[0] == fence[0] and len(run) >= len(fence) and not match.group(2).strip()


def is_script_url(destination: str) -> bool:
    """Whether a link destination runs script, as a browser would read it (entities decoded,
    whitespace and control characters dropped, any case)."""
    return bool(_SCRIPT_SCHEME.match(_INVISIBLE.sub("", html.unescape(destination))))


def _defuse_reference(line: str) -> str:
    match = _REFERENCE.match(line.rstrip("\n"))
    if match is None or not is_script_url(match["dest"].strip()):
        return line
    return f"{match['indent']}\\[{line[len(match['indent']) + 1 :]}"


def _escaped(text: str, index: int) -> bool:
    """Whether the character at `index` is escaped: an odd number of backslashes before it."""
    count = 0
    while index - count - 1 >= 0 and text[index - count - 1] == "\\":
        count += 1
    return count % 2 == 1


def _escape_inline(line: str) -> str:
    """Escape tags and script links outside code spans and autolinks in one line."""
    parts: list[str] = []
    pos = 0
    for start, end in code_spans(line):
        parts.append(_escape_text(line[pos:start]))
        parts.append(line[start:end])
        pos = end
    parts.append(_escape_text(line[pos:]))
    return "".join(parts)


def code_spans(line: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each code span in one line; an escaped backtick opens none."""
    pos = 0
    while True:
        opening = _BACKTICKS.search(line, pos)
        if opening is None:
            return
        if _escaped(line, opening.start()):  # `\`` is a literal backtick, not a code span
            pos = opening.start() + 1
            continue
        run = opening.group(1)
        closing = re.compile(rf"(?<!`){run}(?!`)").search(line, opening.end())
        if closing is None:
            return
        yield opening.start(), closing.end()
        pos = closing.end()


def _escape_text(text: str) -> str:
    parts: list[str] = []
    pos = 0
    for link in _AUTOLINK.finditer(text):
        if _escaped(text, link.start()):
            continue
        parts.append(_escape_tags(text[pos : link.start()]))
        parts.append(link.group(0))
        pos = link.end()
    parts.append(_escape_tags(text[pos:]))
    return "".join(parts)


def _escape_tags(text: str) -> str:
    """Every tag-like `<` as `&lt;`. Escaped or not: Python-Markdown (MkDocs) does not take `\\<`
    as an escape, so a `\\<b>` there is bold; the escaping backslash goes, the entity shows `<`."""
    text = _LINK_DESTINATION.sub(_defuse_link, text)
    out: list[str] = []
    for i, char in enumerate(text):
        if char == "<" and _TAG_START.match(text, i):
            if _escaped(text, i):
                out.pop()
            out.append("&lt;")
        else:
            out.append(char)
    return "".join(out)


def _defuse_link(match: re.Match[str]) -> str:
    """`](javascript:...)` loses its link syntax: `]\\(` shows the text as it was written."""
    return "]\\(" + match["dest"] if is_script_url(match["dest"].strip()) else match[0]
