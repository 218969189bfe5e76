"""The rough edges a new user hits in the app's first minutes, each driven like a user at 80x24 and
120x40: every option of the first question has a key and is on screen, code in the fix is never
cut, the trail names questions in words, and Ctrl+P puts an exact id first."""

from __future__ import annotations

import asyncio
import math
import re

import pytest
from textual.command import CommandList
from textual.widgets import Label, OptionList
from textual.widgets._markdown import MarkdownFence

from triage.core.model import KnowledgeBase, QuestionNode
from triage.tui.app import make_app
from triage.tui.result_screen import ResultScreen
from triage.tui.walk_screen import option_key

from .conftest import ScriptedRunner, settle
from .test_app_walks import NET_FREE

pytestmark = pytest.mark.slow  # drives the Textual app

SIZES = [(80, 24), (120, 40)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_every_option_of_the_first_question_has_a_key_and_is_on_screen(
    kb: KnowledgeBase, size: tuple[int, int]
) -> None:
    first = kb.graph.nodes[kb.graph.start]
    assert isinstance(first, QuestionNode) and len(first.options) > 9
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        options = app.screen.query_one("#options", OptionList)
        assert options.option_count == len(first.options)
        for number in range(1, options.option_count + 1):
            prompt = str(options.get_option_at_index(number - 1).prompt)
            assert prompt.startswith(f"{option_key(number)}  "), prompt
        # all of them on screen at once: nothing to scroll, nothing under the footer
        assert options.max_scroll_y == 0
        assert options.region.bottom <= size[1] - 1
        last = len(first.options)
        await pilot.press(option_key(last))
        await settle(pilot)
        assert app.session.answers == {first.id: str(last)}
        await pilot.press("escape")
        await settle(pilot)
        multi_node = next(n for n, o in enumerate(first.options, 1) if "reach each other" in o.label)
        await pilot.press(option_key(multi_node))  # a letter, not the arrows
        await settle(pilot)
        assert app.session.answers == {first.id: str(multi_node)}


def _long_code(kb: KnowledgeBase) -> list[str]:
    """Entries whose fix holds a code line longer than the fix pane is wide at 120 columns."""
    found = []
    for entry in kb.entries.values():
        lines = [
            line
            for block in re.findall(r"```[^\n]*\n(.*?)```", entry.fix, re.S)
            for line in block.splitlines()
        ]
        if lines and max(len(line) for line in lines) > 70:
            found.append(entry.id)
    return found


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_code_in_the_fix_wraps_instead_of_being_cut(kb: KnowledgeBase, size: tuple[int, int]) -> None:
    entries = _long_code(kb)
    assert "D20" in entries
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        for entry_id in [entries[0], "D20"]:
            app.open_entry(entry_id, "test")
            await settle(pilot)
            await asyncio.sleep(0.2)
            await pilot.pause()
            screen = app.screen
            assert isinstance(screen, ResultScreen) and screen.entry.id == entry_id
            fences = list(screen.query(MarkdownFence))
            assert fences, entry_id
            for fence in fences:
                label = fence.query_one(Label)
                width = label.content_region.width
                needed = sum(
                    max(1, math.ceil(len(line.expandtabs()) / width))
                    for line in fence.code.rstrip().splitlines()
                )
                assert fence.max_scroll_x == 0, (entry_id, fence.code[:40])
                assert label.content_region.height >= needed, (entry_id, width, needed)
            await pilot.press("escape")
            await settle(pilot)


async def test_the_trail_names_questions_in_words(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner({"net": NET_FREE}))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")  # the port probe finds it free and moves on to a question
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ResultScreen)
        trail = str(screen.query_one("#trail").render())
    assert "→ “Which process hit the port clash?”" in trail
    for node_id in (n for n in kb.graph.nodes if "_" in n):
        assert node_id not in trail, node_id


@pytest.mark.parametrize(("typed", "first"), [("D20", "D20"), ("d2", "D2")])
async def test_ctrl_p_puts_an_exact_id_first(kb: KnowledgeBase, typed: str, first: str) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*typed)
        hits = app.screen.query_one(CommandList)
        for _ in range(50):  # the palette searches in the background
            await asyncio.sleep(0.05)
            if hits.option_count:
                break
        await asyncio.sleep(0.2)
        await pilot.pause()
        assert str(hits.get_option_at_index(0).prompt).startswith(f"{first}  ")
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == first
