"""The one question that tells two close candidates apart, taken from the decision graph.

When `ask` finds two entries nearly as likely, the graph already knows how to decide between them:
somewhere a question has one option that leads to the first and another that leads to the second.
Of those questions the most specific one (the fewest entries below it) is asked.
"""

from __future__ import annotations

from typing import NamedTuple

from triage.core.model import KnowledgeBase, ProbeNode, QuestionNode


class Question(NamedTuple):
    """A question of the graph and, for each candidate entry, the answer that leads to it."""

    node: str
    prompt: str
    options: tuple[tuple[str, str], ...]  # (option label, entry id), in the candidates' order


_REACH: dict[int, tuple[KnowledgeBase, dict[str, frozenset[str]]]] = {}


def reachable(kb: KnowledgeBase) -> dict[str, frozenset[str]]:
    """For every node of the graph, the entries a walk from it can end at."""
    cached = _REACH.get(id(kb))
    if cached is not None and cached[0] is kb:
        return cached[1]
    nodes = kb.graph.nodes
    memo: dict[str, frozenset[str]] = {}

    def walk(target: str, visiting: frozenset[str]) -> frozenset[str]:
        if target not in nodes:
            return frozenset({target}) if target in kb.entries else frozenset()
        if target in memo:
            return memo[target]
        if target in visiting:
            return frozenset()
        node = nodes[target]
        inside = visiting | {target}
        if isinstance(node, QuestionNode):
            targets = [o.target for o in node.options] + ([node.unknown] if node.unknown else [])
        else:
            assert isinstance(node, ProbeNode)
            targets = [*node.branches.values(), node.fallback, *([node.default] if node.default else [])]
        found = frozenset().union(*(walk(t, inside) for t in targets)) if targets else frozenset()
        memo[target] = found
        return found

    for node_id in nodes:
        walk(node_id, frozenset())
    _REACH[id(kb)] = (kb, memo)
    return memo


def separating_question(kb: KnowledgeBase, first: str, second: str) -> Question | None:
    """The most specific question with an option towards `first` and another towards `second`."""
    reach = reachable(kb)
    best: tuple[int, str, Question] | None = None
    for node in kb.graph.nodes.values():
        if not isinstance(node, QuestionNode):
            continue
        below = reach.get(node.id, frozenset())
        if first not in below or second not in below:
            continue
        to_first = [o for o in node.options if first in _leads(reach, o.target, kb)]
        to_second = [o for o in node.options if second in _leads(reach, o.target, kb)]
        # Options that lead to one candidate only; an option leading to both decides nothing.
        only_first = [o for o in to_first if o not in to_second]
        only_second = [o for o in to_second if o not in to_first]
        if not only_first or not only_second:
            continue
        question = Question(
            node.id, node.prompt, ((only_first[0].label, first), (only_second[0].label, second))
        )
        key = (len(below), node.id, question)
        if best is None or key[:2] < best[:2]:
            best = key
    return best[2] if best else None


def _leads(reach: dict[str, frozenset[str]], target: str, kb: KnowledgeBase) -> frozenset[str]:
    if target in kb.entries:
        return frozenset({target})
    return reach.get(target, frozenset())
