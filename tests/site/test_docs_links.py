"""Every internal link and anchor of the built site resolves, in HTML and in the Markdown export."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it.token import Token

from tests.site.conftest import FIXTURE_KB
from triage.kb.loader import load_kb
from triage.kb.markdown_ast import make_parser
from triage.render.document import slugify
from triage.site.builder import build

URL_REF = re.compile(r"url\(#([^)]+)\)")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id":
                assert value not in self.ids, f"duplicate id {value!r}"
                self.ids.add(value)
            elif name in ("href", "src", "xlink:href") or (tag == "form" and name == "action"):
                self.refs.append(value)
            self.refs += [f"#{m}" for m in URL_REF.findall(value)]

    handle_startendtag = handle_starttag


def _parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def broken_html_links(site: Path) -> list[str]:
    pages = {p.name: _parse(p) for p in [*site.glob("*.html"), *site.glob("*.svg")]}
    broken = []
    for name, page in pages.items():
        for ref in page.refs:
            parts = urlsplit(ref)
            if parts.scheme in ("http", "https"):
                continue
            assert not parts.scheme and not parts.netloc, f"{name}: {ref} is not a relative link"
            target = unquote(parts.path) or name
            if not (site / target).is_file():
                broken.append(f"{name}: {ref} (no file {target})")
            elif parts.fragment and parts.fragment not in pages.get(target, _Links()).ids:
                broken.append(f"{name}: {ref} (no id {parts.fragment!r} in {target})")
    return broken


def test_html_site_has_no_broken_link_or_anchor(real_site: Path) -> None:
    assert broken_html_links(real_site) == []
    # The check can fail: it sees the links it is meant to see.
    d9 = _parse(real_site / "D9.html")
    assert "D22.html" in d9.refs and "#fix" in d9.refs and {"fix", "root-cause", "verification"} <= d9.ids
    assert any(ref.startswith("graph.html#") for ref in d9.refs)


def test_link_check_reports_a_missing_page_and_anchor(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build(load_kb(FIXTURE_KB, use_compiled=False), site)
    (site / "D22.html").unlink()
    text = (site / "D19.html").read_text(encoding="utf-8")
    (site / "D19.html").write_text(text.replace('href="#fix"', 'href="#fixx"'), encoding="utf-8")
    broken = broken_html_links(site)
    assert any("D22.html (no file" in b for b in broken)
    assert any("#fixx" in b for b in broken)


def _markdown_links(path: Path) -> tuple[set[str], list[str]]:
    tokens = make_parser().parse(path.read_text(encoding="utf-8"))
    anchors: set[str] = set()
    links: list[str] = []

    def walk(items: list[Token]) -> None:
        for index, token in enumerate(items):
            if token.type == "heading_open":
                anchors.add(slugify(items[index + 1].content))
            if token.type in ("link_open", "image"):
                links.append(str(token.attrGet("href") or token.attrGet("src")))
            if token.children:
                walk(token.children)

    walk(tokens)
    return anchors, links


def test_markdown_export_links_resolve(real_markdown: Path) -> None:
    pages = {p.name: _markdown_links(p) for p in real_markdown.glob("*.md")}
    checked = 0
    for name, (_, links) in pages.items():
        for link in links:
            parts = urlsplit(link)
            if parts.scheme in ("http", "https"):
                continue
            target = parts.path or name
            assert (real_markdown / target).is_file(), f"{name}: {link}"
            if parts.fragment:
                assert parts.fragment in pages[target][0], f"{name}: {link}"
            checked += 1
    assert checked > 100
