"""SVG snapshots of the main screens at 80x24 and 120x40 (pytest-textual-snapshot).

They use the small fixture knowledge base, so editing a real entry's wording does not break them,
and a frozen clock, so the probe spinner and its elapsed time are the same on every run.
Regenerate after an intended change with: pytest tests/tui/test_snapshots.py --snapshot-update
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.pilot import Pilot

from triage.core.model import KnowledgeBase
from triage.tui.app import TriageApp, make_app

from .conftest import ScriptedRunner, settle

pytestmark = pytest.mark.slow  # drives the Textual app

SIZES = [(80, 24), (120, 40)]
Snap = Callable[..., bool]


def app_for(kb: KnowledgeBase, runner: ScriptedRunner | None = None) -> TriageApp:
    return make_app(kb, runner or ScriptedRunner(), clock=lambda: 0.0)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_start(snap_compare: Snap, fixture_kb: KnowledgeBase, size: tuple[int, int]) -> None:
    assert snap_compare(app_for(fixture_kb), terminal_size=size, run_before=settle)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_question(snap_compare: Snap, fixture_kb: KnowledgeBase, size: tuple[int, int]) -> None:
    async def answer_first(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("1")
        await settle(pilot)

    assert snap_compare(app_for(fixture_kb), terminal_size=size, run_before=answer_first)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_running_probe(snap_compare: Snap, fixture_kb: KnowledgeBase, size: tuple[int, int]) -> None:
    runner = ScriptedRunner(hold={"net"})

    async def start_probe(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("1", "1")
        assert runner.started.wait(5)
        await pilot.pause()

    assert snap_compare(app_for(fixture_kb, runner), terminal_size=size, run_before=start_probe)
    assert runner.calls == ["net"]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_result(snap_compare: Snap, fixture_kb: KnowledgeBase, size: tuple[int, int]) -> None:
    async def reach_d9(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("3", "1")
        await settle(pilot)

    assert snap_compare(app_for(fixture_kb), terminal_size=size, run_before=reach_d9)
