"""The built site in a real headless Chromium, opened from file:// as a reader would."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.site.conftest import Tab
from triage.core.matcher import rank
from triage.core.model import KnowledgeBase

pytestmark = pytest.mark.slow  # drives a real browser

OpenTab = Callable[..., Tab]


def search(tab: Tab, text: str) -> list[str]:
    """Type into the header search box like a person; the ids of the results shown, in order."""
    tab.page.click("#search-input")
    tab.page.keyboard.type(text)
    tab.page.wait_for_selector("#search-results:not([hidden]) li")
    return [t.strip() for t in tab.page.locator("#search-results li .id").all_inner_texts()]


def test_index_lists_every_entry_by_section_with_badges(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    tab = open_tab()
    tab.goto(real_site / "index.html")
    shown = tab.page.locator("li.entry .id").all_inner_texts()
    assert shown == list(real_kb.entries)
    sections = tab.page.locator("section.kb-section h2").all_inner_texts()
    assert len(sections) == len({e.section for e in real_kb.entries.values()})
    badges = tab.page.locator("li.entry:has(.badge.verify) .id").all_inner_texts()
    assert badges == [e.id for e in real_kb.entries.values() if e.verify.needed]
    assert tab.problems == []


def test_search_end_of_epoch_hang_then_click_through(real_site: Path, open_tab: OpenTab) -> None:
    tab = open_tab()
    tab.goto(real_site / "index.html")
    ids = search(tab, "hangs at end of epoch")
    assert ids[0] == "D9"
    assert "epoch" in tab.page.locator("#search-results li").first.inner_text().lower()
    tab.page.locator("#search-results li a").first.click()
    tab.page.wait_for_url("**/D9.html")
    assert tab.page.locator("h1").inner_text().startswith("D9")
    assert tab.page.locator("section#fix pre code").count() >= 1
    assert tab.problems == []


def test_search_from_an_entry_page_and_enter_opens_the_best_match(real_site: Path, open_tab: OpenTab) -> None:
    tab = open_tab()
    tab.goto(real_site / "P7.html")
    ids = search(tab, "Address already in use when I start a second job")
    assert ids[0] == "D4"
    tab.page.keyboard.press("Enter")
    tab.page.wait_for_url("**/D4.html")
    assert tab.problems == []


def test_a_text_that_names_nothing_lists_no_guesses(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    """A greeting holds no word of any entry: the box says nothing matches instead of listing
    entries that are guesses (as `triage ask` does)."""
    assert not rank(real_kb, "hello, anyone there?").evidence
    tab = open_tab()
    tab.goto(real_site / "index.html", "?q=hello%2C+anyone+there%3F")
    tab.page.wait_for_function(
        "document.querySelector('#search-results [role=status]').textContent.startsWith('Nothing matches')"
    )
    assert tab.page.locator("#search-results li").count() == 0
    tab.goto(real_site / "index.html", "?q=it+hangs")  # vague, but it names a symptom
    tab.page.wait_for_selector("#search-results:not([hidden]) li")
    assert tab.problems == []


def test_search_query_in_the_url_runs_on_load(real_site: Path, open_tab: OpenTab) -> None:
    tab = open_tab()
    tab.goto(real_site / "index.html", "?q=all+ranks+on+gpu+0")
    tab.page.wait_for_selector("#search-results:not([hidden]) li")
    assert tab.page.locator("#search-results li .id").first.inner_text() == "D3"
    assert tab.page.input_value("#search-input") == "all ranks on gpu 0"


def test_browser_ranking_agrees_with_triage_ask(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    """The JavaScript port of the matcher ranks every entry's own test phrasings, and a few pasted
    errors, exactly as `triage ask` does (same order, same calibrated scores)."""
    queries = [case for entry in real_kb.entries.values() for case in entry.cases.match]
    queries += [
        "RuntimeError: Address already in use (errno 98)",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, Timeout(ms)=1800000)",
        "CUDA error: invalid device ordinal",
        "多机多卡训练卡住了，NCCL超时",  # text without spaces: character pairs (text.py's _cjk_terms)
        "单机多卡住 学習がフリーズする 메모리 부족",
        "KeyError: 'module.encoder.weight' ImportError TypeError in the state dict",  # one word each
        "",
        "the and of",
    ]
    assert len(queries) > 40
    tab = open_tab()
    tab.goto(real_site / "index.html")
    tab.page.evaluate("new Promise(done => window.triageSearch.load(done))")
    got = tab.page.evaluate(
        "qs => qs.map(q => window.triageSearch.rank(q).slice(0, 5).map(r => [r.e.id, r.score]))", queries
    )
    for query, browser_hits in zip(queries, got, strict=True):
        expected = [(h.entry.id, h.score) for h in rank(real_kb, query, top=5).hits]
        assert [h[0] for h in browser_hits] == [h[0] for h in expected], query
        for (_, mine), (_, theirs) in zip(browser_hits, expected, strict=True):
            assert abs(mine - theirs) <= 0.0011, query
    assert tab.problems == []


def test_graph_page_shows_its_diagram_and_nodes_link_onward(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    tab = open_tab()
    tab.goto(real_site / "graph.html")
    svg = tab.page.locator("figure.diagram svg")
    box = svg.bounding_box()
    assert box is not None and box["width"] > 600 and box["height"] > 400
    assert svg.locator("a.node.question").count() == sum(
        1 for n in real_kb.graph.nodes.values() if n.type == "question"
    )
    assert svg.locator("a.node.probe").count() == sum(
        1 for n in real_kb.graph.nodes.values() if n.type == "probe"
    )
    assert set(svg.locator("a.node.entry text.id, a.node.outside text.id").all_text_contents()) == set(
        real_kb.entries
    )
    # Following the start question's first option by its link lands on that node's section.
    start = tab.page.locator(f"section#{real_kb.graph.start}")
    start.locator("ol li a").first.click()
    target = tab.page.evaluate("location.hash").lstrip("#")
    assert target in real_kb.graph.nodes
    assert tab.page.locator(f"section#{target}").is_visible()
    # A box in the diagram is a link too.
    svg.locator("a.node.entry").first.click()
    tab.page.wait_for_url("**/*.html")
    assert tab.page.locator("article.entry-page h1").count() == 1
    assert tab.problems == []


def test_every_page_loads_without_console_errors(real_site: Path, open_tab: OpenTab) -> None:
    tab = open_tab()
    pages = [*sorted(real_site.glob("*.html")), real_site / "graph.svg"]
    for page in pages:
        tab.goto(page)
        assert tab.page.title(), page.name
    assert tab.problems == []


def test_readable_at_phone_width_and_dark_mode(real_site: Path, open_tab: OpenTab) -> None:
    light = open_tab(width=390, height=800)
    dark = open_tab(width=390, height=800, color_scheme="dark")
    for name in ("index.html", "D9.html", "graph.html"):
        for tab in (light, dark):
            tab.goto(real_site / name)
            overflow = tab.page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{name} scrolls sideways at 390px"
        backgrounds = [
            t.page.evaluate("getComputedStyle(document.body).backgroundColor") for t in (light, dark)
        ]
        assert backgrounds[0] != backgrounds[1]
    assert light.problems == [] and dark.problems == []


def test_an_entry_page_leads_with_the_verification_note_and_the_fix(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    """As in the app: the fix starts on the first screen, above the symptoms (an entry has up to
    twenty of them), with the note on whether it changes the science right above it."""
    crowded = sorted(real_kb.entries.values(), key=lambda e: -len(e.symptoms))[:5]
    assert len(crowded[0].symptoms) >= 12
    crowded.append(next(e for e in real_kb.entries.values() if e.verify.needed))
    for width, height in ((1280, 800), (1024, 700)):
        tab = open_tab(width=width, height=height)
        for entry in crowded:
            tab.goto(real_site / f"{entry.id}.html")
            fix = tab.page.locator("section#fix").bounding_box()
            symptoms = tab.page.locator("section#symptoms").bounding_box()
            assert fix is not None and symptoms is not None
            assert fix["y"] + 60 < height, (entry.id, width, fix["y"])  # its heading and first line show
            assert fix["y"] < symptoms["y"], entry.id
            if entry.verify.needed:
                note = tab.page.locator("aside.callout.verify").bounding_box()
                assert note is not None and note["y"] < fix["y"], entry.id
        assert tab.problems == []


def test_search_stays_quick_on_a_pasted_megabyte(
    real_site: Path, real_kb: KnowledgeBase, open_tab: OpenTab
) -> None:
    """A pasted megabyte built to make regexes backtrack (`rank1 rank1 ... exhausted`), and a long
    run of one letter: the search answers within a second or two, as `triage ask` does, with the
    same ranking (bounded repeats, windows around each signature's literal, capped fuzzy tokens)."""
    queries = ["rank1 " * 160_000 + "exhausted", "a" * 200_000 + "!", "NCCL WARN " + "a" * 45]
    tab = open_tab()
    tab.goto(real_site / "index.html")
    tab.page.evaluate("new Promise(done => window.triageSearch.load(done))")
    timed = tab.page.evaluate(
        "qs => qs.map(q => { const t = performance.now(); const r = window.triageSearch.rank(q).slice(0, 3);"
        " return [performance.now() - t, r.map(h => h.e.id)]; })",
        queries,
    )
    for query, (ms, ids) in zip(queries, timed, strict=True):
        assert ms < 3000, f"{ms:.0f} ms for a {len(query)}-character query"
        assert ids == [h.entry.id for h in rank(real_kb, query, top=3).hits]
