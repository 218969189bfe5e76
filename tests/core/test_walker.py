"""The walker on the minimal fixture graph: answers, facts, fallbacks, overrides and Back."""

from __future__ import annotations

import pytest

from tests.conftest import MINIMAL_KB
from triage.core.errors import UserError
from triage.core.model import KnowledgeBase, ProbeNode, QuestionNode
from triage.core.walker import back, walk
from triage.kb.loader import load_kb


@pytest.fixture(scope="module")
def mini() -> KnowledgeBase:
    return load_kb(MINIMAL_KB)


def test_starts_at_the_first_question(mini: KnowledgeBase) -> None:
    pos = walk(mini, {})
    assert isinstance(pos.node, QuestionNode) and pos.node.id == "root" and pos.trail == ()


def test_answer_by_number_label_and_case(mini: KnowledgeBase) -> None:
    for answer in ("2", "It hangs", "it HANGS"):
        pos = walk(mini, {"root": answer})
        assert pos.leaf is not None and pos.leaf.id == "D2"
        assert pos.trail[0].answer == "It hangs" and pos.trail[0].via == "answer"


def test_stops_at_probe_until_the_fact_is_known(mini: KnowledgeBase) -> None:
    pos = walk(mini, {"root": "1"})
    assert isinstance(pos.node, ProbeNode) and pos.node.fact == "net.master_port_free"


def test_probe_fact_branches_by_itself(mini: KnowledgeBase) -> None:
    pos = walk(mini, {"root": "1"}, facts={"net.master_port_free": False})
    assert pos.leaf is not None and pos.leaf.id == "D1"
    assert [s.via for s in pos.trail] == ["answer", "fact"]
    assert pos.trail[1].answer == "false"


def test_unavailable_probe_falls_back_to_its_question(mini: KnowledgeBase) -> None:
    pos = walk(mini, {"root": "1"}, unavailable={"net.master_port_free"})
    assert isinstance(pos.node, QuestionNode) and pos.node.id == "ask_more"
    assert pos.trail[-1].via == "fallback"


def test_user_override_beats_the_probe(mini: KnowledgeBase) -> None:
    pos = walk(mini, {"root": "1", "port": "true", "ask_more": "2"}, facts={"net.master_port_free": False})
    assert pos.leaf is not None and pos.leaf.id == "D2"
    assert pos.trail[1].via == "override"


def test_unknown_answer_follows_the_unknown_edge(mini: KnowledgeBase) -> None:
    pos = walk(mini, {"root": "?"}, facts={"net.master_port_free": False})
    assert pos.leaf is not None and pos.leaf.id == "D1"
    assert pos.trail[0].via == "unknown"


def test_back_undoes_the_last_user_answer_skipping_probe_steps(mini: KnowledgeBase) -> None:
    answers = {"root": "1"}
    pos = walk(mini, answers, facts={"net.master_port_free": True})
    assert isinstance(pos.node, QuestionNode) and pos.node.id == "ask_more"
    previous = back(answers, pos)
    assert previous == {}
    assert walk(mini, previous).node is not None and walk(mini, previous).node.id == "root"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"root": "7"}, "options 1-2"),
        ({"root": "make coffee"}, "not an option"),
        ({"ask_more": "?", "root": "1", "port": "true"}, 'no "I don\'t know"'),
        ({"root": "1", "port": "maybe"}, "no branch"),
    ],
)
def test_bad_answers_are_user_errors(mini: KnowledgeBase, answers: dict[str, str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        walk(mini, answers)
