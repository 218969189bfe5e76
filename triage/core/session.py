"""One triage session as plain state: the user's answers, the facts the probes found, and the walk.

The screens keep no state of their own about the diagnosis. They ask the session where the walk
stands, send it answers and probe results, and draw what comes back. Nothing here imports textual,
so `triage walk` drives the same session in a plain terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from triage.core.errors import UserError
from triage.core.facts import ProbeResult
from triage.core.model import Entry, KnowledgeBase, ProbeNode, QuestionNode
from triage.core.walker import Position, Step, back, branch_for, walk


@dataclass(frozen=True)
class ProbeRecord:
    """A probe the session ran (or gave up on) for a probe node, and what came of it."""

    node: str
    probe: str
    fact: str
    result: ProbeResult | None
    cancelled: bool = False

    @property
    def value(self) -> object | None:
        """The fact the node branches on, or None when the probe could not establish it."""
        if self.result is None:
            return None
        return self.result.facts.get(self.fact)


@dataclass(frozen=True)
class OverrideChoice:
    """One value a user may force a probe node to take, and where it leads."""

    value: str
    target: str
    found: bool  # the value the probe actually found (or the one in force now)


@dataclass
class Session:
    """The answers, facts and probe records of one walk through the graph."""

    kb: KnowledgeBase
    answers: dict[str, str] = field(default_factory=dict)
    facts: dict[str, object] = field(default_factory=dict)
    unavailable: set[str] = field(default_factory=set)
    records: list[ProbeRecord] = field(default_factory=list)
    own_words: dict[str, str] = field(default_factory=dict)  # node id -> what the user typed
    skipped: set[str] = field(default_factory=set)  # probes that cannot run at all (no input given)

    @property
    def position(self) -> Position:
        return walk(self.kb, self.answers, self.facts, frozenset(self.unavailable))

    def skip_probes(self, probes: tuple[str, ...] | list[str]) -> None:
        """Probes that cannot run this session (the lint probe without a script): their nodes ask
        their questions straight away, and nothing is said about a probe that never ran."""
        self.skipped.update(probes)
        self.unavailable.update(name for name, fact in self.kb.facts.items() if fact.probe in self.skipped)

    def skipped_step(self, step: Step) -> bool:
        """A probe node passed over because its probe could not run at all: not worth showing."""
        node = self.kb.graph.nodes.get(step.node)
        return (
            isinstance(node, ProbeNode) and step.via == "fallback" and self.probe_name(node) in self.skipped
        )

    def answer(self, node_id: str, answer: str, own_words: str | None = None) -> Position:
        """Answer a question (1-based option number, label, or "unknown"); raises UserError if invalid."""
        node = self.kb.graph.nodes.get(node_id)
        if not isinstance(node, QuestionNode):
            raise UserError(f"{node_id!r} is not a question of the graph")
        candidate = {**self.answers, node_id: answer}
        position = walk(self.kb, candidate, self.facts, frozenset(self.unavailable))
        self.answers = candidate
        if own_words:
            self.own_words[node_id] = own_words
        else:
            self.own_words.pop(node_id, None)
        return position

    def back(self) -> Position | None:
        """Undo the user's last answer (or branch override); None when there is nothing to undo."""
        remaining = back(self.answers, self.position)
        if remaining == self.answers:
            return None
        for node_id in set(self.answers) - set(remaining):
            self.own_words.pop(node_id, None)
        self.answers = remaining
        return self.position

    def rewind(self, step_index: int) -> Position:
        """Go back to the node of trail step `step_index`, undoing every user answer from there on."""
        trail = self.position.trail
        for step in trail[step_index:]:
            if step.by_user:
                self.answers.pop(step.node, None)
                self.own_words.pop(step.node, None)
        return self.position

    def restart(self) -> Position:
        """Forget the answers (the probe facts stay: they describe this machine, not the walk)."""
        self.answers.clear()
        self.own_words.clear()
        return self.position

    def probe_name(self, node: ProbeNode) -> str:
        """The probe that reports the fact a probe node branches on."""
        return self.kb.facts[node.fact].probe

    def record_probe(self, node: ProbeNode, result: ProbeResult) -> Position:
        """Take in every fact a probe reported; the node's own fact missing makes it fall back."""
        self.records.append(ProbeRecord(node.id, result.name, node.fact, result))
        self.facts.update(result.facts)
        if node.fact in result.facts:
            self.unavailable.discard(node.fact)
        else:
            self.unavailable.add(node.fact)
        return self.position

    def cancel_probe(self, node: ProbeNode) -> Position:
        """The user stopped the probe: answer the node's fallback question instead."""
        self.records.append(ProbeRecord(node.id, self.probe_name(node), node.fact, None, cancelled=True))
        self.unavailable.add(node.fact)
        return self.position

    def forget_probe(self, probe: str) -> Position:
        """Drop what a probe found, so the walk asks it again at the next probe node that needs it."""
        for name, fact in self.kb.facts.items():
            if fact.probe == probe:
                self.facts.pop(name, None)
                self.unavailable.discard(name)
        return self.position

    def override(self, node_id: str, value: str) -> Position:
        """Force a probe node down the branch of `value`, whatever the probe found."""
        node = self.kb.graph.nodes.get(node_id)
        if not isinstance(node, ProbeNode):
            raise UserError(f"{node_id!r} is not a probe node of the graph")
        candidate = {**self.answers, node_id: value}
        position = walk(self.kb, candidate, self.facts, frozenset(self.unavailable))
        self.answers = candidate
        return position

    def override_choices(self, node_id: str) -> list[OverrideChoice]:
        """Every value a probe node can be forced to, with its target (values without a branch
        are offered only when the node has a default for them)."""
        node = self.kb.graph.nodes[node_id]
        assert isinstance(node, ProbeNode)
        fact = self.kb.facts.get(node.fact)
        values = list(fact.branch_values) if fact is not None else list(node.branches)
        current = self.step_for(node_id)
        choices = []
        for value in values:
            if value not in node.branches and node.default is None:
                continue
            target, _ = branch_for(node, value)
            choices.append(OverrideChoice(value, target, current is not None and current.answer == value))
        return choices

    def step_for(self, node_id: str) -> Step | None:
        for step in self.position.trail:
            if step.node == node_id:
                return step
        return None

    def last_probe_step(self) -> Step | None:
        """The most recent step of the trail that a probe node decided (or that was overridden)."""
        for step in reversed(self.position.trail):
            if isinstance(self.kb.graph.nodes.get(step.node), ProbeNode):
                return step
        return None

    def record_for(self, node_id: str) -> ProbeRecord | None:
        """The latest probe record that settled a node's fact (run at this node or an earlier one)."""
        node = self.kb.graph.nodes.get(node_id)
        if not isinstance(node, ProbeNode):
            return None
        for record in reversed(self.records):
            if record.fact == node.fact or (record.result is not None and node.fact in record.result.facts):
                return record
        return None

    def probe_results(self) -> list[ProbeResult]:
        """Every probe result gathered in the session, oldest first (cancelled probes have none)."""
        return [record.result for record in self.records if record.result is not None]

    def target_title(self, target: str) -> str:
        """How to name a target to a person: an entry's id and title, or a node's prompt."""
        entry: Entry | None = self.kb.entries.get(target)
        if entry is not None:
            return f"{entry.id} {entry.title}"
        node = self.kb.graph.nodes.get(target)
        return node.prompt if node is not None else target
