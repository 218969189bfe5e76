"""Small screens over the walk: forcing a probe node's branch, and the session's probe results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from triage.core.model import ProbeNode
from triage.core.session import OverrideChoice, ProbeRecord, Session
from triage.tui.widgets import TONE_MARK


class OverrideScreen(ModalScreen[str | None]):
    """Pick the branch a probe node should take instead of the one the probe chose."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(
        self, prompt: str, found: str, choices: list[OverrideChoice], titles: dict[str, str]
    ) -> None:
        super().__init__()
        self.prompt = prompt
        self.found = found
        self.choices = choices
        self.titles = titles

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = "Override a probe's branch"
            yield Static(
                Content.assemble(
                    (self.prompt, "bold"), "\n", (f"The probe found: {self.found}", "$text-muted")
                ),
                id="override-prompt",
            )
            options = []
            for choice in self.choices:
                mark = "● " if choice.found else "  "
                options.append(
                    Option(
                        Content.assemble(
                            mark, (choice.value, "bold"), " → ", self.titles.get(choice.target, choice.target)
                        ),
                        id=choice.value,
                    )
                )
            yield OptionList(*options, id="override-options")
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)


class ProbesScreen(ModalScreen[str | None]):
    """Every probe result gathered in this session; r runs the highlighted probe again."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close"),
        Binding("p", "dismiss(None)", "Close", show=False),
        Binding("r", "rerun", "Run again"),
    ]

    def __init__(self, records: list[ProbeRecord]) -> None:
        super().__init__()
        self.records = records

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as dialog:
            dialog.border_title = f"Probe results ({len(self.records)})"
            if not self.records:
                yield Static(
                    "No probe has run yet. Probes run when the walk reaches a probe node.", id="no-probes"
                )
            options = [Option(self._row(record), id=str(n)) for n, record in enumerate(self.records)]
            yield OptionList(*options, id="probe-list")
            with VerticalScroll(id="probe-detail"):
                yield Static(id="probe-evidence", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        if self.records:
            listing = self.query_one("#probe-list", OptionList)
            listing.highlighted = len(self.records) - 1
            listing.focus()

    @staticmethod
    def _row(record: ProbeRecord) -> Content:
        if record.result is None:
            return Content.assemble(
                (f"{TONE_MARK['cancelled']} {record.probe}", "bold"), "  cancelled by you"
            )
        result = record.result
        return Content.assemble(
            (f"{TONE_MARK.get(result.status, '•')} {result.name}", "bold"),
            f"  {result.status}  {result.duration_s:.1f} s  ",
            (result.summary, "$text-muted"),
        )

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        record = self.records[int(event.option.id or 0)]
        lines: list[str] = []
        if record.result is None:
            lines.append(f"{record.probe}: cancelled before it finished.")
        else:
            result = record.result
            lines.append(f"{result.name}: {result.status} in {result.duration_s:.1f} s. {result.summary}")
            lines += [f"  {name} = {value}" for name, value in sorted(result.facts.items())]
            for item in result.evidence:
                lines += ["", f"$ {item.source}", item.output.rstrip()]
        from triage.core.redact import redact_text

        self.query_one("#probe-evidence", Static).update(redact_text("\n".join(lines)))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()

    def action_rerun(self) -> None:
        listing = self.query_one("#probe-list", OptionList)
        if listing.highlighted is not None and self.records:
            self.dismiss(self.records[listing.highlighted].probe)


def open_override(screen: Screen[Any], session: Session, node_id: str, done: Callable[[], None]) -> None:
    """Ask which branch a probe node should take, apply it to the session, then call `done`."""
    node = session.kb.graph.nodes[node_id]
    assert isinstance(node, ProbeNode)
    record = session.record_for(node_id)
    step = session.step_for(node_id)
    if record is not None and record.result is not None:
        found = record.result.summary or str(record.value)
    elif record is not None:
        found = "nothing (cancelled)"
    else:
        found = step.answer if step else "nothing yet"
    choices = session.override_choices(node_id)
    titles = {c.target: session.target_title(c.target) for c in choices}

    def chosen(value: str | None) -> None:
        if value:
            session.override(node_id, value)
            done()

    screen.app.push_screen(OverrideScreen(node.prompt, found, choices, titles), chosen)
