"""Full walks through the real decision graph in the app, driven by keys and mouse like a user.

Probe results are injected through the ProbeRunner interface, so each path that branches on a
probe is decided by what the test says the machine looks like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from triage.core.facts import ProbeResult
from triage.core.model import KnowledgeBase, ProbeNode
from triage.tui.app import make_app
from triage.tui.result_screen import ResultScreen
from triage.tui.walk_screen import WalkScreen
from triage.tui.widgets import Bubble

from .conftest import ScriptedRunner, result, settle

pytestmark = pytest.mark.slow  # drives the Textual app


@dataclass(frozen=True)
class Path:
    keys: Sequence[str]
    leaf: str
    probes: Mapping[str, ProbeResult] = field(default_factory=dict)
    ran: Sequence[str] = ()  # probes the walk must have run, in order
    vias: Sequence[str] = ()  # how each probe step was decided


NET_BUSY = result("net", "fail", {"net.master_port_free": False}, "port 29500 is held by pid 4242")
NET_FREE = result("net", "ok", {"net.master_port_free": True}, "port 29500 is free")
ENV_PARTIAL = result("env", "warn", {"env.rank_contract": "partial"}, "RANK set, WORLD_SIZE unset")
ENV_COMPLETE = result("env", "ok", {"env.rank_contract": "complete"}, "all five rank variables set")
DIST_OK = result("dist", "ok", {"dist.minitest": "ok"}, "2 ranks: init, barrier, all_reduce ok")
DIST_HANG = result("dist", "fail", {"dist.minitest": "hang"}, "rank 1 never reached the barrier")
FM_DOWN = result("gpu", "fail", {"gpu.fabricmanager": "inactive"}, "nvidia-fabricmanager is inactive")
HANG_D21 = result(
    "hang", "fail", {"hang.verdict": "hang", "hang.first_entry": "d21", "hang.suspects": [0]},
    "rank 0 is in a collective that only some ranks reach (`if rank == 0:`)",
)  # fmt: skip
NIC_BAD = result(
    "net", "fail", {"net.socket_ifname_valid": "invalid"}, "NCCL_SOCKET_IFNAME=ib9 matches nothing"
)

PATHS = {
    "all processes on GPU 0": Path(["5", "1"], "D3"),
    "port held by another job (probe: busy)": Path(["1", "1"], "D4", {"net": NET_BUSY}, ["net"], ["fact"]),
    "port free here, second node clashes (probe: free)": Path(
        ["1", "1", "2"], "D2", {"net": NET_FREE}, ["net"], ["fact"]
    ),
    "rank variables half set (probe: env partial)": Path(
        ["2", "1"], "D1", {"env": ENV_PARTIAL}, ["env"], ["fact"]
    ),
    "mini-test passes, so the hang is in the code": Path(
        ["2", "1", "3"], "D19", {"env": ENV_COMPLETE, "dist": DIST_OK}, ["env", "dist"], ["default", "fact"]
    ),
    "mini-test hangs, fabric manager down": Path(
        ["2", "1", "3"],
        "MN1",
        {"env": ENV_COMPLETE, "dist": DIST_HANG, "gpu": FM_DOWN},
        ["env", "dist", "gpu"],
        ["default", "fact", "fact"],
    ),
    "end of epoch, I don't know the batch counts": Path(["4", "1", "question_mark"], "D9"),
    "frozen now, the hang probe names the entry": Path(
        ["3", "6"], "D21", {"hang": HANG_D21}, ["hang"], ["fact"]
    ),
    "frozen now, no job to look at: asked instead": Path(["3", "6", "1"], "D19", {}, ["hang"], ["fallback"]),
    "frozen at the end of an epoch, look now": Path(
        ["4", "6"], "D21", {"hang": HANG_D21}, ["hang"], ["fact"]
    ),
    "host RAM: out of scope": Path(["7", "2"], "X4"),
    "DeepSpeed config, configs probe unavailable": Path(
        ["1", "5", "2"], "D18", {}, ["configs"], ["fallback"]
    ),
    "multi-node, NCCL_SOCKET_IFNAME names no interface": Path(
        ["end", "up", "up", "up", "enter", "3"], "MN2", {"net": NIC_BAD}, ["net"], ["fact"]
    ),
    "segfault, picked with arrows and Enter": Path(
        ["end", "up", "up", "enter", "down", "down", "enter"], "P6"
    ),
}


@pytest.mark.parametrize("name", list(PATHS))
async def test_walk_reaches_the_leaf(name: str, kb: KnowledgeBase) -> None:
    path = PATHS[name]
    runner = ScriptedRunner(path.probes)
    app = make_app(kb, runner)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        for key in path.keys:
            await pilot.press(key)
            await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ResultScreen), f"{name}: ended on {screen!r}"
        assert screen.entry.id == path.leaf
        assert screen.walked
        assert runner.calls == list(path.ran)
        probe_steps = [
            s
            for s in app.session.position.trail
            if isinstance(kb.graph.nodes[s.node], ProbeNode) and not app.session.skipped_step(s)
        ]
        assert [s.via for s in probe_steps] == list(path.vias)


async def test_the_transcript_shows_each_answer_and_the_probe_finding(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner({"net": NET_BUSY}))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("1", "1")
        await settle(pilot)
        walk = app.screen_stack[-2]
        assert isinstance(walk, WalkScreen) and isinstance(app.screen, ResultScreen)
        lines = [b.line for b in walk.query(Bubble)]
        assert [line.side for line in lines] == [
            "triage",
            "triage",
            "user",
            "triage",
            "user",
            "probe",
            "triage",
        ]
        assert lines[1].text == "What do you see?"
        assert lines[2].text.startswith("It will not start")
        assert lines[5].tone == "fail"
        assert lines[5].detail.startswith("net: port 29500 is held by pid 4242 → D4 ")
        assert lines[6].text.startswith("That points to D4")
        crumbs = str(walk.query_one("#crumbs").render())
        assert "It will not start" in crumbs and "Address already in use" in crumbs


async def test_options_can_be_picked_with_the_mouse(kb: KnowledgeBase) -> None:
    app = make_app(kb, ScriptedRunner())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        # the fifth option's row inside the answer panel's list
        assert await pilot.click("#options", offset=(10, 4))
        await settle(pilot)
        assert app.session.answers == {"what_do_you_see": "5"}
        assert await pilot.click("#options", offset=(10, 0))
        await settle(pilot)
        assert isinstance(app.screen, ResultScreen) and app.screen.entry.id == "D3"
