"""The one question that tells two close candidates apart, taken from the decision graph.

When `ask` finds two entries nearly as likely, the graph already knows how to decide between them:
somewhere a question has one option that leads to the first and another that leads to the second.
Of those questions the most specific one (the fewest entries below it) is asked.
"""

from __future__ import annotations

from triage.core.graph import exits
from triage.core.model import KnowledgeBase, QuestionNode

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import NamedTuple
else:
    from triage.core.records import NamedTuple


class Question(NamedTuple):
    """A question of the graph and, for each candidate entry, the answer that leads to it."""

    node: str
    prompt: str
    options: tuple[tuple[str, str], ...]  # (option label, entry id), in the candidates' order


_REACH: dict[int, tuple[KnowledgeBase, dict[str, frozenset[str]]]] = {}


REACH = "reach"  # the key of reachable()'s result in the compiled index (computed when compiling)


def stored_reach(kb: KnowledgeBase) -> dict[str, list[str]]:
    """reachable() as JSON-ready data, for the compiled index: `ask` reads it rather than decode
    and walk the whole graph each time two answers are close."""
    return {node: sorted(found) for node, found in reachable(kb).items()}


def reachable(kb: KnowledgeBase) -> dict[str, frozenset[str]]:
    """For every node of the graph, the entries a walk from it can end at."""
    cached = _REACH.get(id(kb))
    if cached is not None and cached[0] is kb:
        return cached[1]
    stored = kb.match_index.get(REACH) if kb.match_index is not None else None
    if isinstance(stored, dict):
        found = {node: frozenset(entries) for node, entries in stored.items()}
        _REACH[id(kb)] = (kb, found)
        return found
    nodes = kb.graph.nodes
    memo: dict[str, frozenset[str]] = {}

    def walk(target: str, visiting: frozenset[str]) -> frozenset[str]:
        if target not in nodes:
            return frozenset({target}) if target in kb.entries else frozenset()
        if target in memo:
            return memo[target]
        if target in visiting:
            return frozenset()
        inside = visiting | {target}
        targets = [e.target for e in exits(nodes[target])]
        found = frozenset().union(*(walk(t, inside) for t in targets)) if targets else frozenset()
        memo[target] = found
        return found

    for node_id in nodes:
        walk(node_id, frozenset())
    _REACH[id(kb)] = (kb, memo)
    return memo


def separating_question(kb: KnowledgeBase, first: str, second: str, text: str = "") -> Question | None:
    """The question that best tells `first` from `second`: one with an option towards each.

    Options that lead to one candidate and not the other are preferred, then questions where both
    options are like that, then the most specific question (the fewest entries below it). Where
    several options lead to a candidate, the one the user's `text` already says is shown, then the
    narrowest: a hang report is not asked whether the job "runs, but slower"."""
    reach = reachable(kb)
    best: tuple[tuple[int, int, int, str], Question] | None = None
    words: list[set[str]] = []  # the text's terms, tokenised only when an option must be chosen by them
    for node_id, below in reach.items():  # (a node is decoded only when both are below it)
        if first not in below or second not in below:
            continue
        node = kb.graph.nodes[node_id]
        if not isinstance(node, QuestionNode):
            continue
        leads = [_leads(reach, o.target, kb) for o in node.options]
        said = _said(node, leads, (first, second), text, kb, words)
        one, two = _pick(leads, first, second, said), _pick(leads, second, first, said)
        if one is None or two is None or one == two:
            continue
        shared = int(second in leads[one]) + int(first in leads[two])
        key = (shared, len(below), 0, node.id)
        if best is None or key < best[0]:
            options = ((node.options[one].label, first), (node.options[two].label, second))
            best = (key, Question(node.id, node.prompt, options))
    return best[1] if best else None


def _said(
    node: QuestionNode,
    leads: list[frozenset[str]],
    pair: tuple[str, str],
    text: str,
    kb: KnowledgeBase,
    words: list[set[str]],
) -> dict[int, float]:
    """For options of `node` that compete to lead to one candidate, the share of the option's
    words (label or a keyword, with the vocabulary's variants) the user's text holds. Empty when
    no choice is open: this runs inside `ask`, which must stay fast."""
    if not text:
        return {}
    open_choice = any(sum(1 for found in leads if entry in found) > 1 for entry in pair)
    if not open_choice:
        return {}
    from triage.core.matcher import index_for  # the matcher imports this module lazily

    normalizer = index_for(kb).normalizer
    if not words:
        words.append(set(normalizer.tokens(text)))
    said = {}
    for i, option in enumerate(node.options):
        if any(entry in leads[i] for entry in pair):
            shares = [
                len(terms & words[0]) / len(terms)
                for phrase in (option.label, *option.keywords)
                if (terms := set(normalizer.tokens(phrase)))
            ]
            said[i] = round(max(shares, default=0.0), 2)
    return said


def _pick(leads: list[frozenset[str]], wanted: str, other: str, said: dict[int, float]) -> int | None:
    """The option towards `wanted`: one that does not also lead to `other` first, then the one the
    text says most, then the narrowest."""
    towards = [i for i, found in enumerate(leads) if wanted in found]
    return min(towards, key=lambda i: (other in leads[i], -said.get(i, 0.0), len(leads[i]), i), default=None)


def _leads(reach: dict[str, frozenset[str]], target: str, kb: KnowledgeBase) -> frozenset[str]:
    if target in kb.entries:
        return frozenset({target})
    return reach.get(target, frozenset())
