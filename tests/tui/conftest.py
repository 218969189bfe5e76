"""Fixtures for the TUI tests: knowledge bases, a scripted probe runner, and a way to wait for probes.

The runner implements triage.core.facts.ProbeRunner, the interface the app is built against; tests
choose each probe's result and can hold a probe until it is released or cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterable, Mapping

import pytest
from textual.pilot import Pilot

from tests.conftest import result  # noqa: F401  (re-exported for the TUI tests)
from triage.core.facts import ProbeOptions, ProbeResult


class ScriptedRunner:
    """A probe runner whose results the test chooses. Probes named in `hold` block until
    `release` is set or the app signals their cancel event (which is recorded)."""

    def __init__(self, results: Mapping[str, ProbeResult] | None = None, hold: Iterable[str] = ()) -> None:
        self.results = dict(results or {})
        self.hold = set(hold)
        self.calls: list[str] = []
        self.release = threading.Event()
        self.started = threading.Event()
        self.cancelled: list[str] = []

    def run(self, name: str, options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
        self.calls.append(name)
        self.started.set()
        if name in self.hold:
            while not (self.release.is_set() or cancel.is_set()):
                cancel.wait(0.01)
            if cancel.is_set():
                self.cancelled.append(name)
                return ProbeResult(name, "error", summary="stopped")
        return self.results.get(name) or ProbeResult(name, "unavailable", summary=f"{name} is not scripted")


async def settle(pilot: Pilot[None]) -> None:
    """Wait for running probe workers to finish and the screen to catch up."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run `async def` tests (Pilot tests) in a fresh event loop; no async plugin is installed."""
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(func(**kwargs))
    return True
