"""The Markdown source of every page (triage.render.document): escaping, anchors, links."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape

import markdown
import pytest
from markdown.extensions.toc import slugify as mkdocs_slugify

from tests.conftest import REPO
from triage.core.model import KnowledgeBase
from triage.kb.markdown_ast import make_parser
from triage.render.document import (
    HTML_LINKS,
    MARKDOWN_LINKS,
    NO_LINKS,
    entry_markdown,
    entry_sections,
    graph_markdown,
    md_code,
    md_text,
    safe_markdown,
    slugify,
)

LITERALS = [
    "__init__ got an unexpected keyword",
    "*args and **kwargs",
    "[rank0]: see (this)",
    "py-spy dump --pid <PID>",
    "a & b &amp; c",
    "# not a heading",
    "1. not a list",
    "- not a bullet",
    "> not a quote",
    "`backticks` stay",
    "C:\\path\\to\\file",
    "drop_last=True vs drop_last = False",
    "100% <script>alert(1)</script>",
]


def _text(html: str) -> str:
    return unescape(re.sub(r"<[^>]+>", "", html)).strip()


@pytest.mark.parametrize("literal", LITERALS)
def test_plain_text_shows_exactly_in_markdown_it_and_python_markdown(literal: str) -> None:
    source = md_text(literal)
    assert _text(make_parser().render(source)) == literal
    assert _text(markdown.markdown(source)) == literal


def test_safe_markdown_neutralises_tags_but_keeps_code_and_autolinks() -> None:
    source = (
        "Run `<cmd> --x` then <script>bad()</script> and see <https://example.com/a>.\n\n"
        "  ```html\n  <div>code</div>\n  ```\n\nAfter <b>the</b> fence; a < b stays.\n"
    )
    safe = safe_markdown(source)
    assert "`<cmd> --x`" in safe and "  <div>code</div>" in safe and "<https://example.com/a>" in safe
    assert "&lt;script>" in safe and "&lt;b>" in safe and "a < b" in safe
    html = markdown.markdown(safe, extensions=["fenced_code"])
    assert "<script>" not in html and "<b>" not in html and "&lt;script&gt;" in html
    assert 'href="https://example.com/a"' in html


def test_code_span_holds_any_backticks() -> None:
    for text in ("plain", "with `tick`", "``double``", "`edge"):
        assert _text(make_parser().render(md_code(text))) == text


def test_anchors_are_the_slugs_mkdocs_gives(real_kb: KnowledgeBase) -> None:
    titles = {s.title for e in real_kb.entries.values() for s in entry_sections(e, real_kb)}
    titles |= set(real_kb.graph.nodes) | {s.title for s in real_kb.sections}
    for title in titles:
        assert slugify(title) == mkdocs_slugify(title, "-"), title


def test_every_entry_has_the_fixed_skeleton(real_kb: KnowledgeBase) -> None:
    for entry in real_kb.entries.values():
        anchors = [s.anchor for s in entry_sections(entry, real_kb, HTML_LINKS)]
        assert anchors[:5] == ["fix", "verification", "root-cause", "symptoms", "error-signatures"], entry.id
        page = entry_markdown(entry, real_kb, MARKDOWN_LINKS)
        assert page.startswith(f"# {entry.id}: ")
        if entry.verify.needed:
            assert "needs experiment verification" in page.lower(), entry.id
        for related in entry.related:
            assert f"]({related}.md)" in page, (entry.id, related)


def test_no_links_mode_has_only_external_references(real_kb: KnowledgeBase) -> None:
    for entry in real_kb.entries.values():
        page = entry_markdown(entry, real_kb, NO_LINKS)
        # code is no link: a signature's regex may hold `[-_](?:a|b)` inside its code span
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", page, flags=re.S))
        targets = re.findall(r"\]\(([^)\s]+)\)", prose)
        assert all(t.startswith(("http://", "https://")) for t in targets), (entry.id, targets)


def test_graph_markdown_links_every_option_onward(real_kb: KnowledgeBase) -> None:
    page = graph_markdown(real_kb, MARKDOWN_LINKS)
    for node in real_kb.graph.nodes.values():
        assert f"\n## {node.id}\n" in page
        targets = (
            [o.target for o in node.options] if node.type == "question" else list(node.branches.values())
        )
        for target in targets:
            link = f"](#{target})" if target in real_kb.graph.nodes else f"]({target}.md)"
            assert link in page, (node.id, target)


def test_document_module_does_not_import_markdown_it() -> None:
    code = "import sys, triage.render.document; print('markdown_it' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
