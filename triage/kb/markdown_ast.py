"""Markdown to a small JSON-able block tree, using markdown-it-py.

This is the one Markdown parser of the project. The docs builder renders HTML with the same
parser and settings (`make_parser`); the compiled knowledge stores this tree so the terminal
renderer can draw entries without importing markdown-it on the `ask` path.

Blocks: {"t": "p"|"h"|"code"|"ul"|"ol"|"quote"|"table"|"hr", ...}; inline spans are lists:
["text", s], ["code", s], ["strong", spans], ["em", spans], ["link", href, spans], ["br"].
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

Block = dict[str, Any]
Span = list[Any]


def make_parser() -> MarkdownIt:
    """CommonMark with tables; raw HTML is disabled so entry text can never inject markup."""
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def parse(text: str) -> list[Block]:
    """Markdown parsed into the small block tree the renderers draw."""
    tokens = make_parser().parse(text)
    blocks, _ = _blocks(tokens, 0, None)
    return blocks


def _inline(children: list[Token] | None) -> list[Span]:
    out: list[Span] = []
    stack: list[tuple[str, list[Span], str]] = []
    current = out
    for tok in children or []:
        if tok.type == "text":
            current.append(["text", tok.content])
        elif tok.type == "code_inline":
            current.append(["code", tok.content])
        elif tok.type in ("softbreak",):
            current.append(["text", " "])
        elif tok.type == "hardbreak":
            current.append(["br"])
        elif tok.type in ("strong_open", "em_open", "link_open"):
            href = str(tok.attrGet("href") or "") if tok.type == "link_open" else ""
            stack.append((tok.type.split("_")[0], current, href))
            current = []
        elif tok.type in ("strong_close", "em_close", "link_close") and stack:
            kind, parent, href = stack.pop()
            parent.append(["link", href, current] if kind == "link" else [kind, current])
            current = parent
        elif tok.type == "html_inline" or tok.type == "image":
            current.append(["text", tok.content])
    while stack:  # unbalanced input: flatten what is open
        kind, parent, _ = stack.pop()
        parent.extend(current)
        current = parent
    return out


def _blocks(tokens: list[Token], i: int, close: str | None) -> tuple[list[Block], int]:
    out: list[Block] = []
    while i < len(tokens):
        tok = tokens[i]
        if close is not None and tok.type == close:
            return out, i + 1
        if tok.type == "paragraph_open":
            out.append({"t": "p", "c": _inline(tokens[i + 1].children)})
            i += 3
        elif tok.type == "heading_open":
            out.append({"t": "h", "l": int(tok.tag[1:]), "c": _inline(tokens[i + 1].children)})
            i += 3
        elif tok.type in ("fence", "code_block"):
            out.append(
                {"t": "code", "lang": tok.info.strip().split(" ")[0] if tok.info else "", "text": tok.content}
            )
            i += 1
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            kind = "ul" if tok.type == "bullet_list_open" else "ol"
            items: list[list[Block]] = []
            i += 1
            while tokens[i].type == "list_item_open":
                item, i = _blocks(tokens, i + 1, "list_item_close")
                items.append(item)
            block: Block = {"t": kind, "items": items}
            if kind == "ol":
                block["start"] = int(tok.attrGet("start") or 1)
            out.append(block)
            i += 1  # list close
        elif tok.type == "blockquote_open":
            inner, i = _blocks(tokens, i + 1, "blockquote_close")
            out.append({"t": "quote", "c": inner})
        elif tok.type == "table_open":
            head: list[list[Span]] = []
            rows: list[list[list[Span]]] = []
            row: list[list[Span]] = []
            in_head = False
            i += 1
            while tokens[i].type != "table_close":
                t = tokens[i]
                if t.type == "thead_open":
                    in_head = True
                elif t.type == "thead_close":
                    in_head = False
                elif t.type == "tr_open":
                    row = []
                elif t.type in ("th_open", "td_open"):
                    row.append(_inline(tokens[i + 1].children))
                elif t.type == "tr_close":
                    if in_head:
                        head = row
                    else:
                        rows.append(row)
                i += 1
            out.append({"t": "table", "head": head, "rows": rows})
            i += 1
        elif tok.type == "hr":
            out.append({"t": "hr"})
            i += 1
        elif tok.type == "html_block":
            out.append({"t": "p", "c": [["text", tok.content.strip()]]})
            i += 1
        else:
            i += 1
    return out, i
