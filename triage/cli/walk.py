"""`triage walk`: the decision-graph walk as plain prompts, for a terminal without the app or a script.

Answers come from `--answer NODE=OPTION` first, then from stdin one line each (a terminal or a
pipe). Probe nodes run the real probes unless --no-probes; Ctrl-C during a probe cancels it and
asks the node's question instead. With --json the questions go to stderr and stdout carries one
JSON object: the leaf, the trail, the answers and the probe results.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, TextIO

from triage.core.errors import UserError
from triage.core.exitcodes import Exit

if TYPE_CHECKING:
    from triage.core.facts import ProbeOptions, ProbeResult, ProbeRunner
    from triage.core.model import Entry, ProbeNode, QuestionNode
    from triage.core.session import Session

HELP = "the questions as plain prompts (--answer for scripts)"
DESCRIPTION = (
    "Walk triage's decision graph with plain prompts on stdin/stdout. Answer with an option's number, its "
    'label, ? for "I don\'t know", b to go back, an entry id (e.g. D3) to jump there, or your own words. '
    "For scripts, give answers up front with --answer NODE=OPTION (repeatable; a probe node takes a fact "
    "value, which overrides the probe) or pipe them on stdin one per line; --json prints the leaf and trail."
)
MAX_LINE = 100_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's arguments on its parser."""
    parser.add_argument(
        "--answer",
        action="append",
        default=[],
        metavar="NODE=OPTION",
        help="answer a question (1-based number, label or ?) or force a probe node's value; repeatable",
    )
    parser.add_argument("--json", action="store_true", help="print the leaf, trail and probe results as JSON")
    from probes.options import add_probe_arguments

    add_probe_arguments(parser)


def parse_answers(raw: list[str], session: Session) -> dict[str, str]:
    """--answer values as {node: answer}, refusing unknown nodes, malformed pairs and answers that
    are not options (checked even for nodes the walk may never reach) in one line."""
    from triage.core.model import QuestionNode
    from triage.core.walker import resolve_option

    answers: dict[str, str] = {}
    for item in raw:
        node, sep, value = item.partition("=")
        node, value = node.strip(), value.strip()
        if not sep or not node or not value:
            raise UserError(f"--answer {item!r}: expected NODE=OPTION, e.g. --answer what_do_you_see=5")
        target = session.kb.graph.nodes.get(node)
        if target is None:
            raise UserError(f"--answer {item!r}: {node!r} is not a node of the decision graph")
        if isinstance(target, QuestionNode):
            resolve_option(target, value)  # raises a one-line UserError for a bad answer
        elif value.lower() not in target.branches and target.default is None:
            raise UserError(
                f"--answer {item!r}: “{target.prompt}” (probe node {node!r}) has no branch for {value!r} "
                f"(one of {', '.join(target.branches)})"
            )
        answers[node] = value
    return answers


def run(args: argparse.Namespace) -> int:
    """Run the command; returns its exit status."""
    from probes.options import probe_options
    from probes.runners import NoProbes, default_runner
    from triage.core.session import Session
    from triage.kb.loader import load_kb

    options = probe_options(args)
    session = Session(load_kb())
    session.skip_probes(options.missing_inputs())
    session.answers.update(parse_answers(args.answer, session))
    session.position  # noqa: B018 (validates the given answers now, before any prompt)
    runner = NoProbes("probes switched off (--no-probes)") if args.no_probes else default_runner()
    out = sys.stderr if args.json else sys.stdout
    walker = PlainWalk(session, runner, options, out, interactive=sys.stdin.isatty())
    entry = walker.walk()
    if args.json:
        import json

        print(
            json.dumps(
                walk_json(session, entry, jumped=walker.jumped), indent=2, ensure_ascii=False, default=str
            )
        )
    else:
        from triage.cli._common import print_lines
        from triage.render.entry_text import entry_lines
        from triage.render.terminal import style_for

        print_lines(["", *entry_lines(session.kb, entry, style_for())])
    return Exit.OK


class PlainWalk:
    """Prompts on a text stream; answers from stdin, one line each."""

    def __init__(
        self, session: Session, runner: ProbeRunner, options: ProbeOptions, out: TextIO, *, interactive: bool
    ) -> None:
        self.session = session
        self.runner = runner
        self.options = options
        self.out = out
        self.interactive = interactive
        self.jumped = False

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def walk(self) -> Entry:
        from triage.core.model import ProbeNode, QuestionNode

        while True:
            position = self.session.position
            if position.leaf is not None:
                self.say(f"\n-> {position.leaf.id}: {position.leaf.title}")
                return position.leaf
            node = position.node
            if isinstance(node, ProbeNode):
                self.probe(node)
            elif isinstance(node, QuestionNode):
                entry = self.ask(node)
                if entry is not None:
                    self.jumped = True
                    return entry

    def ask(self, node: QuestionNode) -> Entry | None:
        """Ask one question until it is answered; an entry id typed there jumps to that entry."""
        self.say(f"\n{node.prompt}")
        if node.help:
            self.say(f"  ({node.help})")
        for number, option in enumerate(node.options, 1):
            self.say(f"  {number:>2}. {option.label}")
        if node.unknown is not None:
            self.say("   ?. I don't know")
        while True:
            text = self.read_line(node)
            if not text:
                continue
            if text.lower() in ("b", "back"):
                if self.session.back() is None:
                    self.say("Nothing to undo: this is the first question.")
                    continue
                return None
            entry = self.session.kb.entry(text) if len(text) <= 4 else None
            if entry is not None:
                return entry
            try:
                self.session.answer(node.id, text)
                return None
            except UserError as exc:
                problem = str(exc)
            if self.free_text(node, text):
                return None
            if not self.interactive:
                raise UserError(f"{problem}; stdin gave {text!r}")
            self.say(problem)

    def free_text(self, node: QuestionNode, text: str) -> bool:
        """Own words, by the policy the app uses: an option they fit answers the question; else say
        which entries they point to. True when the question was answered."""
        from triage.core.suggest import reply, suggest

        # A line typed here answers a question (there is no search box), so it is read as mid-walk
        # even at the first question: it never opens an entry on its own; typing an id does.
        found = suggest(self.session.kb, node, text, at_start=False)
        what = reply(found, text, chosen=found.first, explicit=False, mid_walk=True, can_answer=True)
        if what.action == "answer" and what.option is not None:
            self.say(what.message)
            self.session.answer(node.id, str(what.option + 1), own_words=text)
            return True
        if what.action == "suspect":
            self.say(f"{what.message}\nType an id to jump there.")
        return False

    def read_line(self, node: QuestionNode) -> str:
        if self.interactive:
            self.out.write("> ")
            self.out.flush()
        from triage.cli._common import decode_utf8

        raw = sys.stdin.buffer.readline(MAX_LINE + 1)
        if not raw:
            raise UserError(f"no answer to “{node.prompt}”: stdin ended (scripts: --answer {node.id}=N)")
        if len(raw) > MAX_LINE:
            raise UserError(f"an answer on stdin is longer than {MAX_LINE} bytes")
        line = decode_utf8(raw, "an answer on stdin").strip()
        if not self.interactive:
            self.say(f"> {line}")
        return line

    def probe(self, node: ProbeNode) -> None:
        import threading

        name = self.session.probe_name(node)
        self.say(f"\n{node.prompt} (probe {name}; Ctrl-C skips it)")
        cancel = threading.Event()
        box: list[ProbeResult] = []
        failure: list[BaseException] = []

        def work() -> None:
            try:
                box.append(self.runner.run(name, self.options, cancel))
            except Exception as exc:  # a broken probe must not end the walk: ask instead
                failure.append(exc)

        thread = threading.Thread(target=work, name=f"probe-{name}", daemon=True)
        thread.start()
        try:
            while thread.is_alive():
                thread.join(0.1)
        except KeyboardInterrupt:
            cancel.set()
            self.session.cancel_probe(node)
            self.say(f"  {name}: cancelled; asking you instead")
            return
        if box:
            result = box[0]
        else:
            from triage.core.facts import ProbeResult

            why = f"{type(failure[0]).__name__}: {failure[0]}" if failure else "no result"
            result = ProbeResult(name, "error", summary=f"probe failed: {why}")
        position = self.session.record_probe(node, result)
        step = next((s for s in position.trail if s.node == node.id), None)
        where = (
            f" -> {self.session.target_title(step.target)}"
            if step is not None and step.via != "fallback"
            else "; asking you instead"
        )
        self.say(f"  {name}: {result.status} - {result.summary or 'no summary'}{where}")


def walk_json(session: Session, entry: Entry, *, jumped: bool) -> dict[str, Any]:
    """The walk's leaf, trail, answers and probe results as JSON data."""
    from triage.cli._common import entry_json

    position = session.position
    return {
        "leaf": entry_json(session.kb, entry),
        "jumped": jumped,
        "trail": [
            {"node": s.node, "prompt": s.prompt, "answer": s.answer, "target": s.target, "via": s.via}
            for s in position.trail
            if not session.skipped_step(s)
        ],
        "answers": dict(session.answers),
        "probes": [
            {
                "name": r.probe,
                "node": r.node,
                "status": r.result.status if r.result else "cancelled",
                "summary": r.result.summary if r.result else "",
                "facts": {k: v for k, v in r.result.facts.items()} if r.result else {},
            }
            for r in session.records
        ],
    }
