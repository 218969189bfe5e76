"""Markdown to HTML for the docs site, with the project's one parser configuration.

`triage.kb.markdown_ast.make_parser()` has raw HTML disabled, so whatever an entry contains is
shown as text. Here the tokens get what a page needs on top: heading ids that match the slugs
MkDocs would give (so `D9.html#fix` and `D9.md#fix` agree), and heading levels shifted under the
section they sit in.
"""

from __future__ import annotations

from markdown_it import MarkdownIt

from triage.kb.markdown_ast import make_parser
from triage.render.document import slugify


class MarkdownHtml:
    """One parser for a whole build (creating markdown-it per call costs more than rendering)."""

    def __init__(self) -> None:
        self._md: MarkdownIt = make_parser()

    def block(self, markdown: str, *, ids: set[str] | None = None, shift: int = 0) -> str:
        """Render block Markdown. Headings get unique ids (recorded in `ids`) and move down
        `shift` levels, so a heading inside an entry's fix never outranks the section's own."""
        tokens = self._md.parse(markdown)
        used = ids if ids is not None else set()
        for index, token in enumerate(tokens):
            if token.type in ("heading_open", "heading_close"):
                level = min(6, int(token.tag[1:]) + shift)
                token.tag = f"h{level}"
                if token.type == "heading_open":
                    inline = tokens[index + 1]
                    token.attrSet("id", unique_id(slugify(inline.content) or "section", used))
        return str(self._md.renderer.render(tokens, self._md.options, {}))

    def inline(self, markdown: str) -> str:
        """Render one line of inline Markdown (a title, a summary) without a paragraph."""
        return str(self._md.renderInline(markdown))


def unique_id(wanted: str, used: set[str]) -> str:
    """`wanted`, or `wanted_1`, `wanted_2`... as MkDocs does for repeated headings."""
    candidate = wanted
    number = 0
    while candidate in used:
        number += 1
        candidate = f"{wanted}_{number}"
    used.add(candidate)
    return candidate
