"""The app's real probe runner: each probe in a child process, cancellable, and the app walking
on what a real probe found (the env probe, which is quick and needs nothing)."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from probes.runners import ProcessProbes
from triage.core.facts import ProbeOptions
from triage.core.model import KnowledgeBase
from triage.tui.app import make_app

from .conftest import settle

pytestmark = pytest.mark.slow  # drives the Textual app with real probe processes

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_probe_runs_in_a_child_process_and_returns_its_facts(bare_env: None) -> None:
    found = ProcessProbes().run("env", ProbeOptions(timeout_s=20), threading.Event())
    assert found.name == "env" and found.status in ("ok", "warn")
    assert found.facts["env.rank_contract"] == "absent"
    assert found.facts["env.launcher"] == "none"


def test_an_unknown_probe_is_an_error_result() -> None:
    found = ProcessProbes().run("nosuch", ProbeOptions(timeout_s=5), threading.Event())
    assert found.status == "error" and "unknown probe 'nosuch'" in found.summary


# Children that speak the probe_process protocol: one stops when its stdin closes (as the real
# child does), one ignores it and has to be killed.
COOPERATIVE = (
    "import sys, json; sys.stdin.readline(); sys.stdin.readline();"
    "print(json.dumps({'name': 'slow', 'status': 'error', 'summary': 'stopped'}))"
)
STUBBORN = "import sys, time; sys.stdin.readline(); time.sleep(60)"


@pytest.mark.parametrize(("script", "grace"), [(COOPERATIVE, 10.0), (STUBBORN, 0.5)], ids=["stops", "killed"])
def test_cancelling_ends_the_child(script: str, grace: float, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = [
        sys.executable,
        "-c",
        f"import os; open({str(pid_file)!r}, 'w').write(str(os.getpid())); {script}",
    ]
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    found = ProcessProbes(stop_grace_s=grace, command=command).run("slow", ProbeOptions(), cancel)
    assert found.status == "error" and found.summary == "cancelled"
    assert time.monotonic() - started < 0.5 + grace + 2
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_child_that_dies_is_an_error_result_with_its_last_words() -> None:
    command = [
        sys.executable,
        "-c",
        "import sys; sys.stdin.readline(); sys.exit('segfault in libnccl (simulated)')",
    ]
    found = ProcessProbes(command=command).run("gpu", ProbeOptions(), threading.Event())
    assert found.status == "error"
    assert found.summary == "the probe process failed: segfault in libnccl (simulated)"


async def test_the_app_walks_on_a_real_probe(kb: KnowledgeBase, bare_env: None) -> None:
    app = make_app(kb)  # the production runner
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("2", "1")  # hangs at start-up, one machine: the env probe reads this shell
        for _ in range(100):
            await settle(pilot)
            if app.session.records:
                break
        (record,) = app.session.records
        assert record.probe == "env" and record.result is not None
        assert app.session.facts["env.rank_contract"] == "absent"
        step = app.session.position.trail[-1]
        assert (step.node, step.via, step.answer) == ("hang_init_env", "default", "absent")
        node = app.session.position.node
        assert node is not None and node.id == "hang_init_single"
