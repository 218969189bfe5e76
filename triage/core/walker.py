"""Walking the decision graph: answers and probe facts in, the next node or the leaf out.

Pure: no probe is run here. When the walk reaches a probe node whose fact is not known yet, the
walker stops there and the front end runs the probe (or marks it unavailable) and asks again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from triage.core.errors import UserError
from triage.core.model import Entry, KnowledgeBase, Node, ProbeNode, QuestionNode

UNKNOWN_ANSWERS = frozenset({"?", "unknown", "dont-know", "don't know", "i don't know", "idk"})

Via = Literal["answer", "unknown", "fact", "default", "fallback", "override"]


@dataclass(frozen=True)
class Step:
    """One hop of the trail: at `node`, `answer` (an option label or a fact value) led to `target`."""

    node: str
    prompt: str
    answer: str
    target: str
    via: Via

    @property
    def by_user(self) -> bool:
        return self.via in ("answer", "unknown", "override")


@dataclass(frozen=True)
class Position:
    """Where a walk stands: a node waiting for input, or a leaf, and the trail that led there."""

    trail: tuple[Step, ...]
    node: Node | None = None
    leaf: Entry | None = None

    @property
    def done(self) -> bool:
        return self.leaf is not None


def resolve_option(node: QuestionNode, answer: str) -> tuple[str, str, Via]:
    """(label, target, via) for an answer given as a 1-based number, a label, or "unknown"."""
    text = answer.strip()
    if text.lower() in UNKNOWN_ANSWERS:
        if node.unknown is None:
            raise UserError(f'“{node.prompt}” has no "I don\'t know" option')
        return "I don't know", node.unknown, "unknown"
    if text.isdigit():
        index = int(text) - 1
        if 0 <= index < len(node.options):
            option = node.options[index]
            return option.label, option.target, "answer"
        raise UserError(f"“{node.prompt}” has options 1-{len(node.options)}, not {text}")
    for option in node.options:
        if option.label.lower() == text.lower():
            return option.label, option.target, "answer"
    raise UserError(f"{text!r} is not an option of “{node.prompt}” (give a number 1-{len(node.options)})")


def branch_for(node: ProbeNode, value: str) -> tuple[str, Via]:
    """The target a probe value leads to: its branch, else the default, else the fallback question."""
    if value in node.branches:
        return node.branches[value], "fact"
    if node.default is not None:
        return node.default, "default"
    return node.fallback, "fallback"


def walk(
    kb: KnowledgeBase,
    answers: Mapping[str, str],
    facts: Mapping[str, object] | None = None,
    unavailable: frozenset[str] | set[str] = frozenset(),
) -> Position:
    """Follow the graph from its start as far as the answers and facts allow.

    `answers` maps node ids to an answer: for a question, a 1-based option number, an option label
    or "unknown"; for a probe node, a fact value that overrides what the probe found.
    `facts` maps fact names to values (bools become "true"/"false"); `unavailable` names facts
    whose probe could not run, so their probe nodes fall back to the question.
    """
    facts = facts or {}
    trail: list[Step] = []
    current = kb.graph.start
    for _ in range(len(kb.graph.nodes) + 1):  # the graph is acyclic (KB002), so this bounds the walk
        entry = kb.entries.get(current)
        if entry is not None:
            return Position(tuple(trail), leaf=entry)
        node = kb.graph.nodes.get(current)
        if node is None:
            raise UserError(f"unknown graph node {current!r}")
        if isinstance(node, QuestionNode):
            if node.id not in answers:
                return Position(tuple(trail), node=node)
            label, target, via = resolve_option(node, answers[node.id])
            trail.append(Step(node.id, node.prompt, label, target, via))
        else:
            if node.id in answers:
                value = answers[node.id].strip().lower()
                if value not in node.branches and node.default is None:
                    raise UserError(f"“{node.prompt}” (a probe's question) has no branch for {value!r}")
                target, _ = branch_for(node, value)
                trail.append(Step(node.id, node.prompt, value, target, "override"))
            elif node.fact in facts:
                value = fact_text(facts[node.fact])
                target, via = branch_for(node, value)
                trail.append(Step(node.id, node.prompt, value, target, via))
            elif node.fact in unavailable:
                trail.append(Step(node.id, node.prompt, "unavailable", node.fallback, "fallback"))
                target = node.fallback
            else:
                return Position(tuple(trail), node=node)
        current = target
    raise UserError("the decision graph has a cycle; run `triage kb check`")


def fact_text(value: object) -> str:
    """How a fact value is compared with branch keys: bools as "true"/"false", else lower-case text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).lower()


def back(answers: Mapping[str, str], position: Position) -> dict[str, str]:
    """The answers with the user's last answer undone (steps decided by probes are skipped over)."""
    remaining = dict(answers)
    for step in reversed(position.trail):
        if step.by_user and step.node in remaining:
            del remaining[step.node]
            return remaining
    return remaining
