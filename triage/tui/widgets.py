"""The small widgets the screens are built from: transcript, breadcrumb, probe spinner, search box.

Widgets only draw what they are given and post messages about what the user did; the screens
turn those messages into calls on the session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from triage.core.suggest import Suggestion, Suggestions
from triage.render.conversation import Line

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TONE_MARK = {
    "ok": "✓",
    "warn": "!",
    "fail": "✗",
    "error": "✗",
    "unavailable": "–",
    "cancelled": "–",
    "override": "↷",
}


class Bubble(Static):
    """One message of the transcript; its side and tone become CSS classes."""

    def __init__(self, line: Line) -> None:
        self.line = line
        classes = f"bubble -{line.side}" + (f" -tone-{line.tone}" if line.tone else "")
        super().__init__(self._content(line), classes=classes, markup=False)

    @staticmethod
    def _content(line: Line) -> Content:
        text = Content(line.text)
        if line.side == "probe":
            mark = TONE_MARK.get(line.tone, "•")
            text = Content.assemble((f"{mark} ", "bold"), (line.text, "bold"))
        elif line.side == "triage":
            text = Content.assemble(("triage  ", "bold $accent"), line.text)
        elif line.side == "user":
            text = Content.assemble(line.text)
        if line.detail:
            text = Content.assemble(text, "\n", (line.detail, "$text-muted"))
        return text


class Transcript(VerticalScroll):
    """The conversation, oldest at the top, scrolled to the newest line after each change."""

    def show(self, lines: Sequence[Line]) -> None:
        current = [child for child in self.children if isinstance(child, Bubble)]
        keep = 0
        while keep < min(len(current), len(lines)) and current[keep].line == lines[keep]:
            keep += 1
        for child in current[keep:]:
            child.remove()
        if keep < len(lines):
            self.mount_all([Bubble(line) for line in lines[keep:]])
        self.call_after_refresh(self.scroll_end, animate=False)


class Breadcrumb(Static):
    """The answers so far, newest last; each crumb can be clicked to go back to that question."""

    def show(self, crumbs: Sequence[tuple[int, str]]) -> None:
        if not crumbs:
            self.update(Content.from_markup("[dim]Start[/dim]"))
            return
        parts: list[Content] = [Content.from_markup("[dim]Start[/dim]")]
        for index, label in crumbs:
            short = label if len(label) <= 28 else label[:27] + "…"
            parts.append(Content.from_markup(" [dim]›[/dim] "))
            parts.append(Content.from_markup(f"[@click=screen.rewind({index})]$label[/]", label=short))
        self.update(Content.assemble(*parts))


class ProbeStatus(Static):
    """A spinner and the elapsed time while a probe runs. The clock is injected so that snapshot
    tests can freeze it."""

    can_focus = True
    started: reactive[float] = reactive(0.0)

    def __init__(self, clock: Callable[[], float], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._clock = clock
        self._label = ""
        self._probe = ""

    def on_mount(self) -> None:
        self._ticker = self.set_interval(0.1, self.refresh, pause=True)

    def start(self, probe: str, label: str) -> None:
        self._probe = probe
        self._label = label
        self.started = self._clock()
        self._ticker.resume()
        self.refresh()

    def stop(self) -> None:
        self._ticker.pause()

    def render(self) -> Content:
        elapsed = max(0.0, self._clock() - self.started)
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        return Content.assemble(
            (f"{frame} ", "bold $accent"),
            (f"{self._probe}: ", "bold"),
            self._label,
            (f"  {elapsed:4.1f} s", "$text-muted"),
            ("\nEsc cancels and asks you instead; the rest of the app keeps working.", "$text-muted"),
        )


class SearchBox(Input):
    """The search box. Up and Down move through the suggestions without leaving the box."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down", "move(1)", "Next", show=False),
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("escape", "leave", "Leave search", show=False),
    ]

    class Move(Message):
        def __init__(self, step: int) -> None:
            super().__init__()
            self.step = step

    class Leave(Message):
        pass

    def action_move(self, step: int) -> None:
        self.post_message(self.Move(step))

    def action_leave(self) -> None:
        self.post_message(self.Leave())


class SuggestionList(OptionList):
    """Entries and options that match the search box's text, best offer first."""

    suggestions: Suggestions = Suggestions((), "no_match", False)

    def show(self, suggestions: Suggestions) -> None:
        self.suggestions = suggestions
        rows: list[Option] = []
        if suggestions.different_symptom:
            rows.append(
                Option(Content("That sounds like a different problem. triage now suspects:"), disabled=True)
            )
        rows.extend(Option(self._row(item)) for item in suggestions.items)
        if not suggestions.items:
            rows.append(Option(Content("No entry or option matches yet; keep typing."), disabled=True))
        self.set_options(rows)  # one update, not one per row: this runs on every keystroke
        self.highlighted = self._first_enabled()

    def _first_enabled(self) -> int | None:
        for index in range(self.option_count):
            if not self.get_option_at_index(index).disabled:
                return index
        return None

    def chosen(self) -> Suggestion | None:
        """The suggestion under the highlight."""
        if self.highlighted is None:
            return None
        offset = 1 if self.suggestions.different_symptom else 0
        index = self.highlighted - offset
        return self.suggestions.items[index] if 0 <= index < len(self.suggestions.items) else None

    @staticmethod
    def _row(item: Suggestion) -> Content:
        score = f"{round(item.score * 100):3d}%"
        if item.kind == "option":
            return Content.assemble(("answer ", "bold $success"), item.label, (f"  {score}", "$text-muted"))
        return Content.assemble(
            (f"{item.entry_id:<5}", "bold $accent"), " ", item.label, (f"  {score}", "$text-muted")
        )
