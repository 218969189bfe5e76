"""Back, probe overrides and cancellation, search and free text, the palette, the probes panel,
breadcrumbs and typing ahead: each driven through the app like a user (exporting: test_app_export)."""

from __future__ import annotations

import threading

import pytest
from textual.events import Key, Paste
from textual.widgets import OptionList

from triage.core.facts import ProbeOptions, ProbeResult
from triage.core.model import KnowledgeBase, QuestionNode
from triage.tui.app import make_app
from triage.tui.modals import OverrideScreen, ProbesScreen
from triage.tui.result_screen import ResultScreen
from triage.tui.walk_screen import WalkScreen
from triage.tui.widgets import Bubble, ProbeStatus, SearchBox, SuggestionList

from .conftest import ScriptedRunner, result, settle
from .test_app_walks import NET_BUSY

pytestmark = pytest.mark.slow  # drives the Textual app


def transcript(screen: WalkScreen) -> str:
    return "\n".join(f"{b.line.text} {b.line.detail}" for b in screen.query(Bubble))


async def test_back_undoes_the_last_answer(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4", "1")
        await settle(pilot)
        node = app.session.position.node
        assert node is not None and node.id == "loader_question"
        await pilot.press("escape")
        await settle(pilot)
        node = app.session.position.node
        assert node is not None and node.id == "hang_end"
        assert app.session.answers == {"what_do_you_see": "4"}
        assert "At the very last batch" not in transcript(app.screen)  # type: ignore[arg-type]
        await pilot.press("2")  # a different answer this time
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D21"
        await pilot.press("backspace")  # Back on the result undoes the answer that led there
        await settle(pilot)
        assert isinstance(app.screen, WalkScreen)
        assert app.session.answers == {"what_do_you_see": "4"}


async def test_back_at_the_first_question_says_so(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("escape")
        await settle(pilot)
        assert app.session.answers == {}
        assert any("Nothing to undo" in str(n.message) for n in app._notifications)


async def test_a_probes_branch_can_be_overridden(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner({"net": NET_BUSY}))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D4"
        await pilot.press("o")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, OverrideScreen)
        values = [c.value for c in dialog.choices]
        assert values == ["true", "false"]
        assert [c.found for c in dialog.choices] == [False, True]
        await pilot.press("home", "enter")  # "true": the port is free after all
        await settle(pilot)
        assert isinstance(app.screen, WalkScreen)
        node = app.session.position.node
        assert node is not None and node.id == "port_where"
        assert app.session.position.trail[-1].via == "override"
        assert "Take the “true” branch" in transcript(app.screen)
        await pilot.press("2")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D2"


async def test_escape_cancels_a_running_probe_and_input_stays_live(kb: KnowledgeBase) -> None:
    runner = ScriptedRunner({"net": NET_BUSY}, hold={"net"})
    app = make_app(kb, runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await pilot.pause()
        assert runner.started.wait(5)
        walk = app.screen
        assert isinstance(walk, WalkScreen)
        assert walk.query_one(ProbeStatus).display
        assert walk.job is not None and walk.job.probe == "net"
        # The probe is still running, and the search box answers at once.
        await pilot.press("slash", *"gpu 0")
        await pilot.pause()
        listing = walk.query_one(SuggestionList)
        assert listing.display and listing.suggestions.items
        await pilot.press("escape")  # leaves the search box
        await pilot.press("escape")  # cancels the probe
        await settle(pilot)
        assert runner.cancelled == ["net"]
        node = app.session.position.node
        assert isinstance(node, QuestionNode) and node.id == "port_where"
        assert [r.cancelled for r in app.session.records] == [True]
        assert "net: cancelled; asking you instead" in transcript(walk)
        assert not walk.query_one(ProbeStatus).display


async def test_a_probe_that_raises_becomes_a_visible_error_and_the_question_is_asked(
    kb: KnowledgeBase,
) -> None:
    class Broken(ScriptedRunner):
        def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
            raise RuntimeError("nvml exploded")

    app = make_app(kb, Broken())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        node = app.session.position.node
        assert node is not None and node.id == "port_where"
        (record,) = app.session.records
        assert record.result is not None and record.result.status == "error"
        assert "RuntimeError: nvml exploded" in record.result.summary


async def test_search_to_result_and_back(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("slash", *"every process piles onto gpu 0")
        await pilot.pause()
        listing = app.screen.query_one(SuggestionList)
        first = listing.chosen()
        assert first is not None and first.entry_id == "D3"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D3"
        assert not app.screen.walked
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, WalkScreen) and app.session.answers == {}


async def test_a_pasted_traceback_is_matched_by_its_signature(kb: KnowledgeBase) -> None:
    trace = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 88, in <module>\n'
        "    loss = model(batch).sum()\n"
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new "
        "one. This error indicates that your module has parameters that were not used in producing loss.\n"
    )
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        app.screen.post_message(Paste(trace))
        await settle(pilot)
        listing = app.screen.query_one(SuggestionList)
        first = listing.chosen()
        assert first is not None and first.entry_id == "D8"
        assert any("error text matches" in r for r in first.reasons)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D8"


async def test_own_words_answer_the_question(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("5", "slash")
        app.screen.query_one(SearchBox).value = "all of them on gpu 0"
        await pilot.press("enter")
        await settle(pilot)
        assert app.session.own_words == {"placement": "all of them on gpu 0"}
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D3"


async def test_words_about_another_problem_name_suspects_and_offer_a_jump(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "slash")
        app.screen.query_one(SearchBox).value = "every epoch trains on the same data order"
        await pilot.press("enter")
        await settle(pilot)
        walk = app.screen
        assert isinstance(walk, WalkScreen)
        node = app.session.position.node
        assert node is not None and node.id == "launch_error"  # not answered
        assert walk.suspects and walk.suspects[0] == "D22"
        assert "I now suspect:\n  D22 (" in transcript(walk)
        await pilot.press("j")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D22"


async def test_command_palette_jumps_to_an_entry(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"MN4")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "MN4"


async def test_related_entries_open_on_top_and_close_back(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("5", "1")
        await settle(pilot)
        first = app.screen
        assert isinstance(first, ResultScreen)
        related = first.query_one("#related", OptionList)
        related.focus()
        related.highlighted = 0
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == first.entry.related[0]
        await pilot.press("escape")
        await settle(pilot)
        assert app.screen is first


async def test_theme_toggles_between_dark_and_light(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.theme == "textual-dark"
        await pilot.press("t")
        assert app.theme == "textual-light"
        await pilot.press("t")
        assert app.theme == "textual-dark"


async def test_probes_panel_lists_results_and_runs_one_again(kb: KnowledgeBase) -> None:
    runner = ScriptedRunner({"net": NET_FREE_THEN_BUSY[0]})
    app = make_app(kb, runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        node = app.session.position.node
        assert node is not None and node.id == "port_where"
        await pilot.press("p")
        await settle(pilot)
        panel = app.screen
        assert isinstance(panel, ProbesScreen)
        assert [r.probe for r in panel.records] == ["net"]
        evidence = str(panel.query_one("#probe-evidence").render())
        assert "port 29500 is free" in evidence
        runner.results["net"] = NET_FREE_THEN_BUSY[1]
        await pilot.press("r")
        await settle(pilot)
        assert runner.calls == ["net", "net"]
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D4"


NET_FREE_THEN_BUSY = (
    result("net", "ok", {"net.master_port_free": True}, "port 29500 is free"),
    NET_BUSY,
)


async def test_keys_typed_faster_than_the_screen_updates_land_in_the_search_box(kb: KnowledgeBase) -> None:
    """A terminal delivers "/gpu 0 /x" in one read: every key after "/" belongs to the box,
    including a later "/" (a path in an error)."""
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for char in "/gpu 0 /x":
            app.post_message(Key({"/": "slash", " ": "space"}.get(char, char), char))
        await settle(pilot)
        assert app.screen.query_one(SearchBox).value == "gpu 0 /x"
        assert isinstance(app.screen, WalkScreen) and app.session.answers == {}


async def test_clicking_a_breadcrumb_goes_back_to_that_question(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("4", "1")
        await settle(pilot)
        assert len(app.session.answers) == 2
        # "Start › It hangs at the end of an… › At the very last batch…": click the second crumb
        crumbs = str(app.screen.query_one("#crumbs").render())
        x = 1 + crumbs.index("At the very")
        assert await pilot.click("#crumbs", offset=(x + 2, 0))
        await settle(pilot)
        assert app.session.answers == {"what_do_you_see": "4"}
        node = app.session.position.node
        assert node is not None and node.id == "hang_end"
