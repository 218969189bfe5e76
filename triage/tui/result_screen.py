"""The result: the fix as Markdown under a banner on experiment verification, the trail and
evidence that led here, related entries, and keys to copy the first command and export a report."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar, Literal

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Markdown, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState, get_current_worker

from triage.core.facts import ProbeOptions, ProbeRunner
from triage.core.model import Entry, KnowledgeBase, ProbeNode
from triage.core.session import Session
from triage.core.walker import Step
from triage.render import report
from triage.render.conversation import evidence_text
from triage.render.verify import verify_headline
from triage.tui.modals import OverrideScreen, ProbesScreen


@dataclass(frozen=True)
class ResultAction:
    """What the user asked the walk to do when leaving a result."""

    kind: Literal["back", "restart", "override", "rerun"]
    node: str | None = None
    value: str | None = None


# The sections of the shared entry document the result shows, in this order: the fix first.
RESULT_PARTS = ("fix", "verification", "root_cause", "signatures", "references")


def entry_markdown(kb: KnowledgeBase, entry: Entry) -> str:
    """The entry as the result screen shows it: the summary, then the fix, its verification note
    and the cause, taken from the same Markdown the CLI and the docs site render."""
    from triage.render.document import entry_sections, md_inline

    lines = [md_inline(entry.summary), ""]
    for part in entry_sections(entry, kb, only=RESULT_PARTS):
        lines += [f"## {part.title}", "", part.body, ""]
    return "\n".join(lines).rstrip() + "\n"


class ResultScreen(Screen[ResultAction | None]):
    """One entry, reached by the walk (Back undoes the last answer) or opened directly (Back closes)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("backspace", "back", "Back", show=False),
        Binding("c", "copy", "Copy cmd"),
        Binding("e", "export", "Export"),
        Binding("o", "override", "Override"),
        Binding("p", "probes", "Probes"),
        Binding("n", "restart", "New walk"),
    ]

    def __init__(self, session: Session, entry: Entry, *, walked: bool, how: str = "") -> None:
        super().__init__()
        self.session = session
        self.entry = entry
        self.walked = walked
        self.how = how
        self.trail: tuple[Step, ...] = session.position.trail if walked else ()
        self.report_path: Path | None = None

    def compose(self) -> ComposeResult:
        entry = self.entry
        needed = entry.verify.needed
        mark = "⚠" if needed else "✓"
        with Vertical(id="banner", classes="-verify" if needed else "-no-verify"):
            yield Static(Content(f"{mark}  {verify_headline(entry)}"), id="banner-head")
            yield Static(Content(entry.verify.why.strip()), id="banner-why")
        kind = "  (not covered by triage: where to look instead)" if not entry.covered else ""
        yield Static(
            Content.assemble((f"{entry.id}  ", "bold $accent"), (entry.title, "bold"), (kind, "$text-muted")),
            id="title",
        )
        with Horizontal(id="body"):
            with VerticalScroll(id="doc"):
                yield Markdown(entry_markdown(self.session.kb, entry), id="fix")
            with VerticalScroll(id="side"):
                yield Static("How triage got here", classes="heading")
                yield Static(self._trail_text(), id="trail", markup=False)
                yield Static("Evidence", classes="heading")
                yield Static(self._evidence_text(), id="evidence", markup=False)
                related = [self.session.kb.entries[r] for r in entry.related if r in self.session.kb.entries]
                yield Static("Related (Enter opens)", classes="heading")
                yield OptionList(
                    *(
                        Option(Content.assemble((f"{r.id:<5}", "bold $accent"), r.title), id=r.id)
                        for r in related
                    ),
                    id="related",
                )
        yield Static("", id="saved")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#doc").focus()
        self.query_one("#saved").display = False

    def _trail_text(self) -> str:
        lines: list[str] = []
        if self.how:
            lines.append(self.how)
        shown = [step for step in self.trail if not self.session.skipped_step(step)]
        for number, step in enumerate(shown, 1):
            node = self.session.kb.graph.nodes.get(step.node)
            target = self._target_words(step.target)
            if isinstance(node, ProbeNode):
                probe = self.session.probe_name(node)
                if step.via == "override":
                    lines.append(f"{number}. {probe}: you chose “{step.answer}” → {target}")
                elif step.via == "fallback":
                    lines.append(f"{number}. {probe}: did not run; you were asked")
                else:
                    lines.append(f"{number}. {probe}: {node.fact} = {step.answer} → {target}")
            else:
                lines.append(f"{number}. {step.prompt} {step.answer}")
        return "\n".join(lines) or "Opened directly."

    def _target_words(self, target: str) -> str:
        """Where a step led, in words: an entry's id, or the next question as it is asked."""
        if target in self.session.kb.entries:
            return target
        return f"“{self.session.target_title(target)}”"

    def _evidence_text(self) -> str:
        lines: list[str] = []
        probe_nodes = [
            s.node for s in self.trail if isinstance(self.session.kb.graph.nodes.get(s.node), ProbeNode)
        ]
        for node_id in probe_nodes:
            record = self.session.record_for(node_id)
            if record is None:
                continue
            if record.result is None:
                lines.append(f"{record.probe}: cancelled")
                continue
            lines.append(f"{record.probe} ({record.result.status}): {record.result.summary}")
            evidence = evidence_text(record, limit=4)
            if evidence:
                lines.append(evidence)
        for c in report.confirmations(self.entry, self.session.facts):
            word = "supports this" if c.agrees else "does not fit this"
            lines.append(f"{'✓' if c.agrees else '✗'} {c.confirm.fact} = {c.value} {word}")
        return "\n".join(lines) or "No probe evidence: this result came from your answers."

    # -- actions ---------------------------------------------------------------------------

    def action_back(self) -> None:
        self.dismiss(ResultAction("back") if self.walked else None)

    def action_restart(self) -> None:
        self.dismiss(ResultAction("restart"))

    def action_copy(self) -> None:
        command = report.first_command(self.session.kb, self.entry)
        if command is None:
            self.notify("This fix has no command to copy.", severity="warning")
            return
        self.app.copy_to_clipboard(command)
        first = command.splitlines()[0]
        more = " …" if "\n" in command else ""
        self.notify(f"Copied to the clipboard: {first}{more}", title="Copied")

    def action_export(self) -> None:
        self.notify("Looking at what the walk did not, then writing the report…", title="Report")
        self.export_report()

    @work(thread=True, exclusive=True, exit_on_error=False, group="export")
    def export_report(self) -> Path:
        """The same document as `triage report`, with this session's walk and diagnosis: the probes
        the walk did not run are run now (in the runner's child processes), never recorded in it."""
        import socket
        from concurrent.futures import ThreadPoolExecutor

        from triage.core.findings import findings
        from triage.render.report import REPORT_PROBES, ReportInput, build_report, not_run_here

        app = self.app
        session = self.session
        cancel = get_current_worker().cancelled_event
        options: ProbeOptions = getattr(app, "probe_options", ProbeOptions())
        runner: ProbeRunner = getattr(app, "runner")  # noqa: B009 (the app's, not this screen's)
        done = session.probe_results()
        wanted = [*REPORT_PROBES, *(["lint"] if options.script else [])]
        missing = [name for name in wanted if name not in {r.name for r in done}]
        with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
            extra = list(pool.map(lambda name: runner.run(name, options, cancel), missing))
        reader = getattr(app, "read_inventory", None)
        inventory = reader(options.timeout_s, cancel) if reader is not None else None
        results = [*done, *extra]
        facts: dict[str, object] = {}
        for result in results:
            facts.update(result.facts)
        flagged = {f for r in results for f in r.flagged}
        now = datetime.now().astimezone()
        data = ReportInput(
            when=now,
            host=socket.gethostname(),
            command="the interactive app, `e` on the result",
            results=results,
            not_run=not_run_here(results, script=options.script),
            inventory=inventory,
            inventory_why="probes are switched off (--no-probes)",
            findings=findings(facts, session.kb, flagged),
            entry=self.entry,
            how=self.how or ("Reached by the walk below." if self.trail else ""),
            trail=self.trail,
            own_words=session.own_words,
            cancelled=[r.probe for r in session.records if r.cancelled],
        )
        text = build_report(session.kb, data)
        app_dir = getattr(app, "report_dir", None)
        directory = Path(app_dir) if app_dir is not None else Path.cwd()
        directory.mkdir(exist_ok=True)  # --report-dir names a folder the first export creates
        return write_new(directory, report.report_filename(self.entry.id, now), text)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "export":
            return
        if event.state == WorkerState.SUCCESS and isinstance(event.worker.result, Path):
            self.report_path = event.worker.result.resolve()
            saved = self.query_one("#saved", Static)
            saved.update(Content.assemble(("Report written to ", "bold"), str(self.report_path)))
            saved.display = True
            self.notify(str(self.report_path), title="Report written")
        elif event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(f"Could not write the report: {error}", severity="error")

    def action_override(self) -> None:
        steps = [s for s in self.trail if isinstance(self.session.kb.graph.nodes.get(s.node), ProbeNode)]
        if not steps:
            self.notify("No probe chose a branch on the way here.")
            return
        step = steps[-1]
        node = self.session.kb.graph.nodes[step.node]
        assert isinstance(node, ProbeNode)
        record = self.session.record_for(node.id)
        found = record.result.summary if record and record.result else step.answer
        choices = self.session.override_choices(node.id)
        titles = {c.target: self.session.target_title(c.target) for c in choices}

        def chosen(value: str | None) -> None:
            if value:
                self.dismiss(ResultAction("override", node.id, value))

        self.app.push_screen(OverrideScreen(node.prompt, found or step.answer, choices, titles), chosen)

    def action_probes(self) -> None:
        def rerun(probe: str | None) -> None:
            if probe:
                self.dismiss(ResultAction("rerun", value=probe))

        self.app.push_screen(ProbesScreen(list(self.session.records)), rerun)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "override":
            return any(isinstance(self.session.kb.graph.nodes.get(s.node), ProbeNode) for s in self.trail)
        return True

    @on(OptionList.OptionSelected, "#related")
    def related_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.open_entry(event.option.id or "", how=f"Related to {self.entry.id}.")

    def open_entry(self, entry_id: str, how: str) -> None:
        """Open another entry on top of this one; what the user does there is passed down."""
        entry = self.session.kb.entry(entry_id)
        if entry is None:
            self.notify(f"No entry {entry_id}", severity="error")
            return

        def forward(action: ResultAction | None) -> None:
            if action is not None:
                self.dismiss(action)

        self.app.push_screen(ResultScreen(self.session, entry, walked=False, how=how), forward)


def write_new(directory: Path, name: str, text: str) -> Path:
    """Write `text` to a file that did not exist (never through a link, never over an earlier
    report): `name`, else `name` with -2, -3, ... before the suffix."""
    stem, suffix = name.rsplit(".", 1)
    for attempt in range(1, 100):
        path = directory / (name if attempt == 1 else f"{stem}-{attempt}.{suffix}")
        try:
            with path.open("x", encoding="utf-8") as handle:
                handle.write(text)
        except FileExistsError:
            continue
        return path
    raise OSError(f"no free file name for {name} in {directory}")
