"""The Textual app and the one factory the CLI, the tests and the bench build it with.

The probe runner is injected: the CLI passes the real probes (probes.registry.LocalProbeRunner),
tests pass a runner of their own with fixed results and controllable delays.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen

from probes.runners import NoProbes, app_runner
from triage.core.facts import ProbeOptions, ProbeRunner
from triage.core.inventory import Inventory
from triage.core.model import KnowledgeBase
from triage.core.session import Session
from triage.tui.palette import EntryCommands

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["NoProbes", "TriageApp", "make_app"]

InventoryReader = Callable[[float, threading.Event], Inventory]

THEMES = ("textual-dark", "textual-light")


class TriageApp(App[None]):
    """triage's interactive front end."""

    CSS_PATH = "app.tcss"
    TITLE = "triage"
    SUB_TITLE = "distributed PyTorch triage"
    COMMANDS = App.COMMANDS | {EntryCommands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]  # noqa: RUF012 (declared so by App)
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]  # noqa: RUF012
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("t", "toggle_theme", "Theme"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(
        self,
        kb: KnowledgeBase,
        runner: ProbeRunner,
        *,
        options: ProbeOptions | None = None,
        report_dir: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
        theme: str = "textual-dark",
        read_inventory: InventoryReader | None = None,
        handle_signals: bool = False,
    ) -> None:
        super().__init__()
        self.handle_signals = handle_signals
        self.kb = kb
        self.runner = runner
        # What the exported report lists about the machine beyond the probes; None: not looked at.
        self.read_inventory = read_inventory
        self.probe_options = options or ProbeOptions()
        self.report_dir = report_dir
        self.clock = clock
        self.session = Session(kb)
        self.session.skip_probes(self.probe_options.missing_inputs())
        self.theme = theme

    def get_default_screen(self) -> Screen[None]:
        from triage.tui.walk_screen import WalkScreen

        return WalkScreen(self.session, self.runner, self.probe_options, self.clock)

    def on_mount(self) -> None:
        if self.handle_signals:
            import asyncio
            import signal

            loop = asyncio.get_running_loop()
            for name in ("SIGINT", "SIGTERM", "SIGHUP"):
                number = getattr(signal, name, None)
                if number is not None:
                    loop.add_signal_handler(number, self._end_by_signal, number)

    def _end_by_signal(self, number: int) -> None:
        """Ctrl-C, SIGTERM, SIGHUP: stop every probe at once, then close as `q` does."""
        self.exit(return_code=128 + number)

    def exit(self, result: None = None, return_code: int = 0, message: RenderableType | None = None) -> None:
        # A probe still running must not hold the exit up, nor outlive the app: its processes go now.
        shutdown = getattr(self.runner, "shutdown", None)
        if callable(shutdown):
            shutdown()
        super().exit(result, return_code, message)

    def action_toggle_theme(self) -> None:
        self.theme = THEMES[1] if self.theme == THEMES[0] else THEMES[0]

    def open_entry(self, entry_id: str, how: str) -> None:
        """Open an entry from anywhere (the command palette): on top of a result, or from the walk."""
        from triage.tui.result_screen import ResultScreen
        from triage.tui.walk_screen import WalkScreen

        screen = self.screen
        if isinstance(screen, ResultScreen):
            screen.open_entry(entry_id, how)
            return
        walks = [s for s in self.screen_stack if isinstance(s, WalkScreen)]
        if walks:
            walk: WalkScreen = walks[-1]
            while len(self.screen_stack) > 1 and self.screen is not walk:
                self.pop_screen()
            walk.open_entry(entry_id, how)


def make_app(
    kb: KnowledgeBase | None = None,
    runner: ProbeRunner | None = None,
    *,
    options: ProbeOptions | None = None,
    report_dir: Path | None = None,
    clock: Callable[[], float] = time.monotonic,
    theme: str = "textual-dark",
    read_inventory: InventoryReader | None = None,
    handle_signals: bool = False,
) -> TriageApp:
    """Build the app: the bundled knowledge base and the real probes unless told otherwise. The
    machine's inventory (for the exported report) is read only where probes may run.

    `handle_signals` (the CLI's app, not the tests'): Ctrl-C, SIGTERM and SIGHUP close the app,
    stopping its probes, instead of tearing it down mid-frame."""
    if kb is None:
        from triage.kb.loader import load_kb

        kb = load_kb()
    if read_inventory is None and not isinstance(runner, NoProbes):
        from probes.inventory import collect

        read_inventory = collect
    return TriageApp(
        kb,
        runner if runner is not None else app_runner(),
        options=options,
        report_dir=report_dir,
        clock=clock,
        theme=theme,
        read_inventory=read_inventory,
        handle_signals=handle_signals,
    )
