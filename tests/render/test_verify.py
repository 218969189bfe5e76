"""The one wording of "does this fix change the experiment", everywhere the site and reports say it."""

from __future__ import annotations

from html import escape

from triage.core.model import VERIFY_CHANGES, KnowledgeBase
from triage.render.verify import CHANGE_WORDS, badge_meaning
from triage.site.builder import index_markdown
from triage.site.markdown_html import MarkdownHtml
from triage.site.pages import index_page


def test_every_kind_of_change_has_its_words_and_the_badge_names_them_all() -> None:
    assert set(CHANGE_WORDS) == set(VERIFY_CHANGES)
    meaning = badge_meaning()
    assert all(words in meaning for words in CHANGE_WORDS.values())


def test_both_site_indexes_explain_the_badge_in_those_words(kb: KnowledgeBase) -> None:
    assert escape(badge_meaning()) in index_page(kb, MarkdownHtml())
    assert badge_meaning() in index_markdown(kb)
