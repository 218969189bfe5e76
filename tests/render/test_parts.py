"""An entry's parts come in one order in every front end: terminal, report, app and site."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from triage.core.model import KnowledgeBase
from triage.render.document import entry_markdown
from triage.render.entry_text import entry_lines
from triage.render.parts import PARTS, entry_parts
from triage.render.report import ReportInput, build_report
from triage.render.terminal import Style

ORDER = [p.title for p in PARTS]


def _in_order(titles: list[str]) -> bool:
    positions = [ORDER.index(t) for t in titles]
    return positions == sorted(positions) and len(titles) >= 3


def test_the_site_page_shows_every_part_in_the_one_order(kb: KnowledgeBase) -> None:
    for entry in kb.entries.values():
        titles = re.findall(r"^## (.+)$", entry_markdown(entry, kb), re.M)
        assert titles == [p.title for p in entry_parts(entry, kb)], entry.id


def test_show_follows_the_one_order(kb: KnowledgeBase) -> None:
    entry = kb.entries["D9"]
    lines = entry_lines(kb, entry, Style(color=False, width=100))
    titles = [line for line in lines if line in ORDER]
    assert _in_order(titles), titles
    assert titles[0] == "Fix" and "Root cause" in titles and "References" in titles


def test_the_report_follows_the_one_order(kb: KnowledgeBase) -> None:
    entry = kb.entries["D9"]
    text = build_report(kb, ReportInput(when=datetime.now(UTC), host="h", command="test", entry=entry))
    fix = text.split("\n## Fix\n", 1)[1].split("\n## ", 1)[0]
    titles = ["Fix", *(t for t in re.findall(r"^### (.+)$", fix, re.M) if t in ORDER)]
    assert _in_order(titles), titles


def test_the_app_result_screen_follows_the_one_order(kb: KnowledgeBase) -> None:
    from triage.tui.result_screen import entry_markdown as screen_markdown

    titles = re.findall(r"^## (.+)$", screen_markdown(kb, kb.entries["D9"]), re.M)
    assert _in_order(titles), titles
