"""The main screen: search box, breadcrumb, the conversation, and the answer panel.

It draws the session's position and turns what the user does into calls on the session: an
answer, a Back, a probe result, an override. Which node comes next is always the walker's call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.events import Key, Paste
from textual.screen import Screen
from textual.widgets import Footer, Input, OptionList
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState, get_current_worker

from triage.core.errors import UserError
from triage.core.facts import ProbeOptions, ProbeResult, ProbeRunner
from triage.core.model import ProbeNode, QuestionNode
from triage.core.session import Session
from triage.core.suggest import NOTHING, Suggestion, Suggestions, reply, suggest
from triage.render.conversation import conversation
from triage.tui.modals import ProbesScreen, open_override
from triage.tui.widgets import Breadcrumb, ProbeStatus, SearchBox, SuggestionList, Transcript

if TYPE_CHECKING:
    from triage.tui.result_screen import ResultAction

UNKNOWN_ID = "unknown"
OPEN_ID = "open-result"
# The key for each option: 1-9, then letters that no other key of this screen or the app uses
# (j jumps, n restarts, o overrides, p lists probes, q quits, t switches the theme).
OPTION_KEYS = "123456789abcdefghiklmrsuvwxyz"


def option_key(number: int) -> str:
    """The key that answers option `number` (1-based), or "" past the last key."""
    return OPTION_KEYS[number - 1] if 1 <= number <= len(OPTION_KEYS) else ""


@dataclass
class ProbeJob:
    """A probe the walk started for a node; `token` tells a current job from a superseded one."""

    node: ProbeNode
    probe: str
    token: int
    worker: Worker[ProbeResult] | None = None


class WalkScreen(Screen[None]):
    """Start screen and conversation: the first question, then each node the walk reaches."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("backspace", "back", "Back", show=False),
        # A priority binding runs as the key arrives, so "/gpu" typed fast lands in the search box.
        Binding("slash", "search", "Search", priority=True),
        Binding("question_mark", "unknown", "Don't know", show=False),
        *(Binding(key, f"choose({n})", show=False) for n, key in enumerate(OPTION_KEYS, 1)),
        Binding("j", "jump", "Jump"),
        Binding("o", "override", "Override"),
        Binding("p", "probes", "Probes"),
        Binding("n", "restart", "New walk", show=False),
    ]

    def __init__(
        self,
        session: Session,
        runner: ProbeRunner,
        options: ProbeOptions,
        clock: Callable[[], float],
    ) -> None:
        super().__init__()
        self.session = session
        self.runner = runner
        self.probe_options = options
        self.clock = clock
        self.notes: dict[int, list[str]] = {}
        self.suspects: list[str] = []
        self.job: ProbeJob | None = None
        self.jobs: dict[Worker[ProbeResult], ProbeJob] = {}
        self._tokens = 0
        self._moved = False  # the user moved through the suggestions, so Enter means that row

    def compose(self) -> ComposeResult:
        yield SearchBox(
            placeholder="/  Search, describe it in your own words, or paste an error", id="search"
        )
        yield SuggestionList(id="suggestions")
        yield Breadcrumb(id="crumbs")
        yield Transcript(id="transcript")
        with Vertical(id="panel"):
            yield OptionList(id="options")
            yield ProbeStatus(self.clock, id="probe-status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#suggestions").display = False
        self.show_position(open_leaf=True)
        self.query_one("#options").focus()
        # The first screen is painted without the result screen and the matcher; load them
        # just after, so the first search and the first result do not wait for the imports.
        self.set_timer(0.2, self.warm_up)

    def warm_up(self) -> None:
        import triage.tui.result_screen  # noqa: F401
        from triage.core.matcher import index_for

        index_for(self.session.kb)

    # -- drawing ---------------------------------------------------------------------------

    def show_position(self, open_leaf: bool = True) -> None:
        """Draw where the walk stands; start a probe or open the result when that is where it is."""
        position = self.session.position
        self.query_one(Transcript).show(conversation(self.session, self.notes))
        self.query_one(Breadcrumb).show([(i, s.answer) for i, s in enumerate(position.trail) if s.by_user])
        options = self.query_one("#options", OptionList)
        status = self.query_one(ProbeStatus)
        panel = self.query_one("#panel")
        node = position.node
        if isinstance(node, ProbeNode):
            self.start_probe(node)
            options.display = False
            status.display = True
            panel.border_title = "Probe running"
            if self.focused is None or self.focused is options:
                status.focus()  # keys keep working (Esc, p, /) while the answer list is hidden
            return
        self.stop_probe()
        status.stop()
        status.display = False
        options.display = True
        if self.focused is None or self.focused is status:
            options.focus()
        options.clear_options()
        if isinstance(node, QuestionNode):
            last = option_key(len(node.options)) or " "
            panel.border_title = f"Your answer: 1-{last}, ↑↓ Enter, or click" + (
                ", ? don't know" if node.unknown else ""
            )
            for number, option in enumerate(node.options, 1):
                key = option_key(number) or " "
                options.add_option(Option(Content.assemble((f"{key}  ", "bold $accent"), option.label)))
            if node.unknown is not None:
                options.add_option(
                    Option(Content.assemble(("?  ", "bold $accent"), "I don't know"), id=UNKNOWN_ID)
                )
            options.highlighted = 0
        elif position.leaf is not None:
            panel.border_title = "Result"
            options.add_option(
                Option(
                    Content.assemble(("↵  ", "bold $accent"), f"Open the fix for {position.leaf.id}"),
                    id=OPEN_ID,
                )
            )
            options.highlighted = 0
            if open_leaf:
                self.open_result(walked=True)
        self.refresh_bindings()

    # -- answering -------------------------------------------------------------------------

    @on(OptionList.OptionSelected, "#options")
    def option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id == UNKNOWN_ID:
            self.action_unknown()
        elif event.option.id == OPEN_ID:
            self.open_result(walked=True)
        else:
            self.action_choose(event.option_index + 1)

    def action_choose(self, number: int) -> None:
        node = self.session.position.node
        if isinstance(node, QuestionNode) and 1 <= number <= len(node.options):
            self.answer(node, str(number))

    def action_unknown(self) -> None:
        node = self.session.position.node
        if isinstance(node, QuestionNode) and node.unknown is not None:
            self.answer(node, "unknown")

    def answer(self, node: QuestionNode, answer: str, own_words: str | None = None) -> None:
        try:
            self.session.answer(node.id, answer, own_words)
        except UserError as exc:
            self.notify(str(exc), severity="error")
            return
        self.suspects = []
        self.show_position()

    def action_back(self) -> None:
        if self.job is not None:
            self.cancel_probe()
            return
        if self.session.back() is None:
            self.notify("Nothing to undo: this is the first question.")
            return
        self.suspects = []
        self.show_position(open_leaf=False)

    def action_rewind(self, index: int) -> None:
        """Go back to the question of a breadcrumb (clicked)."""
        self.stop_probe()
        self.session.rewind(index)
        self.show_position(open_leaf=False)
        self.query_one("#options").focus()

    def action_restart(self) -> None:
        self.stop_probe()
        self.session.restart()
        self.notes.clear()
        self.suspects = []
        self.show_position(open_leaf=False)

    # -- probes ----------------------------------------------------------------------------

    def start_probe(self, node: ProbeNode) -> None:
        if self.job is not None and self.job.node.id == node.id:
            return
        self.stop_probe()
        self._tokens += 1
        job = ProbeJob(node, self.session.probe_name(node), self._tokens)
        self.job = job
        self.query_one(ProbeStatus).start(job.probe, node.prompt)
        job.worker = self.run_probe(job)
        self.jobs[job.worker] = job

    @work(thread=True, exclusive=True, exit_on_error=False, group="probe")
    def run_probe(self, job: ProbeJob) -> ProbeResult:
        # The worker's cancelled_event is set by Worker.cancel(): by Escape, by a newer probe
        # (exclusive), and by the app when it closes, which must never wait on a probe thread.
        return self.runner.run(job.probe, self.probe_options, get_current_worker().cancelled_event)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every probe worker ends here: a result, or an error turned into a visible result."""
        job = self.jobs.get(event.worker)
        if job is None or event.state not in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            return
        del self.jobs[event.worker]
        if self.job is None or job.token != self.job.token:
            return  # cancelled, or the user moved on: the walk no longer waits for this one
        if event.state == WorkerState.SUCCESS and isinstance(event.worker.result, ProbeResult):
            result = event.worker.result
        else:
            error = event.worker.error
            why = f"{type(error).__name__}: {error}" if error is not None else "the probe stopped"
            result = ProbeResult(job.probe, "error", summary=f"probe failed: {why}")
        self.job = None
        self.session.record_probe(job.node, result)
        self.show_position()

    def stop_probe(self) -> None:
        """Let go of a running probe without recording anything (the walk moved elsewhere)."""
        if self.job is not None:
            if self.job.worker is not None:
                self.job.worker.cancel()
            self.job = None

    def cancel_probe(self) -> None:
        """Escape during a probe: stop it and ask the node's question instead."""
        job = self.job
        if job is None:
            return
        self.stop_probe()
        self.session.cancel_probe(job.node)
        self.notify(f"Cancelled the {job.probe} probe; answering by hand instead.")
        self.show_position()

    def action_override(self) -> None:
        step = self.session.last_probe_step()
        if step is None:
            self.notify("No probe has chosen a branch yet.")
            return
        open_override(self, self.session, step.node, lambda: self.show_position())

    def action_probes(self) -> None:
        def rerun(probe: str | None) -> None:
            if probe:
                self.session.forget_probe(probe)
                self.show_position()

        self.app.push_screen(ProbesScreen(list(self.session.records)), rerun)

    # -- search and free text --------------------------------------------------------------

    def action_search(self) -> None:
        box = self.query_one(SearchBox)
        if self.focused is box:  # (has_focus lags behind set_focus until the Focus event is handled)
            # In the box "/" is just a character (paths in errors). Queue it behind the keys the
            # box has not handled yet, so fast typing keeps its order.
            box.post_message(Key("slash", "/"))
            return
        # At once, not via focus() (which waits a turn): "/gpu" typed fast must land in the box.
        self.set_focus(box)

    def on_paste(self, event: Paste) -> None:
        """A paste (a traceback, a log line) anywhere goes to the search box."""
        box = self.query_one(SearchBox)
        if not box.has_focus:
            event.stop()
            self.set_focus(box)
            box.insert_text_at_cursor(event.text)

    @on(Input.Changed, "#search")
    def search_changed(self, event: Input.Changed) -> None:
        listing = self.query_one(SuggestionList)
        self._moved = False
        if not event.value.strip():
            listing.display = False
            listing.show(NOTHING)
            return
        position = self.session.position
        node = position.node if isinstance(position.node, QuestionNode) else None
        listing.show(suggest(self.session.kb, node, event.value, at_start=not position.trail))
        listing.display = True

    @on(SearchBox.Move)
    def search_move(self, event: SearchBox.Move) -> None:
        listing = self.query_one(SuggestionList)
        if listing.display and listing.option_count:
            self._moved = True
            if event.step > 0:
                listing.action_cursor_down()
            else:
                listing.action_cursor_up()

    @on(SearchBox.Leave)
    def search_leave(self) -> None:
        self.clear_search()
        self.query_one("#options").focus()

    @on(Input.Submitted, "#search")
    def search_submitted(self, event: Input.Submitted) -> None:
        listing = self.query_one(SuggestionList)
        chosen = listing.chosen() if listing.display else None
        self.take(chosen, listing.suggestions, event.value.strip(), explicit=self._moved)

    @on(OptionList.OptionSelected, "#suggestions")
    def suggestion_clicked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        listing = self.query_one(SuggestionList)
        self.take(
            listing.chosen(), listing.suggestions, self.query_one(SearchBox).value.strip(), explicit=True
        )

    def take(self, item: Suggestion | None, found: Suggestions, text: str, explicit: bool) -> None:
        """Act on the user's words: answer with an option, open an entry, or say what triage suspects.

        Enter takes the highlighted row. At the start (or on a row the user picked) an entry row opens
        that entry; mid-walk, words that fit no option are answered with the suspects and a jump key,
        so one stray sentence does not throw away the walk."""
        if not text:
            return
        position = self.session.position
        at = len(position.trail)
        self.clear_search()
        self.query_one("#options").focus()
        what = reply(
            found,
            text,
            chosen=item,
            explicit=explicit,
            mid_walk=bool(position.trail) and position.leaf is None,
            can_answer=isinstance(position.node, QuestionNode),
        )
        if what.action == "answer" and isinstance(position.node, QuestionNode) and what.option is not None:
            self.answer(position.node, str(what.option + 1), own_words=text)
        elif what.action == "open" and what.entry_id is not None:
            self.open_entry(what.entry_id, how=what.message)
        else:
            jump = ""
            if what.action == "suspect":
                self.suspects = [e.entry_id for e in what.suspects if e.entry_id]
                jump = f"\nPress j to jump to {self.suspects[0]}, or keep answering." if self.suspects else ""
            self.notes.setdefault(at, []).append(what.message + jump)
            self.show_position(open_leaf=False)

    def clear_search(self) -> None:
        box = self.query_one(SearchBox)
        with box.prevent(Input.Changed):
            box.value = ""
        listing = self.query_one(SuggestionList)
        listing.show(NOTHING)
        listing.display = False

    def action_jump(self) -> None:
        if self.suspects:
            self.open_entry(self.suspects[0], how="Jumped to a suspect named during the walk.")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "jump":
            return bool(self.suspects)
        if action == "override":
            return self.session.last_probe_step() is not None
        return True

    # -- results ---------------------------------------------------------------------------

    def open_result(self, walked: bool) -> None:
        from triage.tui.result_screen import ResultScreen  # the Markdown widget: loaded when first needed

        leaf = self.session.position.leaf
        if leaf is None or not self.is_current:
            return
        self.app.push_screen(ResultScreen(self.session, leaf, walked=True), self.result_closed)

    def open_entry(self, entry_id: str, how: str) -> None:
        from triage.tui.result_screen import ResultScreen

        entry = self.session.kb.entry(entry_id)
        if entry is None:
            self.notify(f"No entry {entry_id}", severity="error")
            return
        self.app.push_screen(ResultScreen(self.session, entry, walked=False, how=how), self.result_closed)

    def result_closed(self, action: ResultAction | None) -> None:
        if action is None:
            self.show_position(open_leaf=False)
        elif action.kind == "back":
            self.session.back()
            self.show_position(open_leaf=False)
        elif action.kind == "restart":
            self.action_restart()
        elif action.kind == "override" and action.node and action.value:
            self.session.override(action.node, action.value)
            self.show_position()
        elif action.kind == "rerun" and action.value:
            self.session.forget_probe(action.value)
            self.show_position()
        self.query_one("#options").focus()
