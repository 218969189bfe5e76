"""The session: answers, Back, probe results, cancellation and overrides, on the fixture graph."""

from __future__ import annotations

import pytest

from tests.conftest import result
from triage.core.errors import UserError
from triage.core.facts import ProbeResult
from triage.core.model import KnowledgeBase, ProbeNode
from triage.core.session import Session


def probe_node(session: Session) -> ProbeNode:
    node = session.position.node
    assert isinstance(node, ProbeNode)
    return node


def test_answers_lead_to_a_leaf_and_back_undoes_them_one_by_one(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1")
    position = session.answer("launch_error", "2", own_words="RANK is not set")
    assert position.leaf is not None and position.leaf.id == "D1"
    assert session.own_words == {"launch_error": "RANK is not set"}

    position = session.back()
    assert position is not None and position.node is not None and position.node.id == "launch_error"
    assert session.own_words == {}
    position = session.back()
    assert position is not None and position.node is not None and position.node.id == "what_do_you_see"
    assert session.back() is None


def test_an_invalid_answer_leaves_the_session_unchanged(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    with pytest.raises(UserError, match="options 1-5"):
        session.answer("what_do_you_see", "9")
    assert session.answers == {}


def test_a_probe_result_chooses_the_branch(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1")
    session.answer("launch_error", "1")
    node = probe_node(session)
    assert session.probe_name(node) == "net"
    position = session.record_probe(node, result("net", "fail", {"net.master_port_free": False}))
    assert position.leaf is not None and position.leaf.id == "D4"
    assert position.trail[-1].via == "fact" and position.trail[-1].answer == "false"


def test_a_probe_without_the_fact_falls_back_to_the_question(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1")
    session.answer("launch_error", "1")
    position = session.record_probe(
        probe_node(session), ProbeResult("net", "unavailable", summary="no sockets")
    )
    assert position.node is not None and position.node.id == "port_where"
    assert position.trail[-1].via == "fallback"


def test_a_cancelled_probe_falls_back_and_is_recorded(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "2")
    node = probe_node(session)
    position = session.cancel_probe(node)
    assert position.node is not None and position.node.id == "hang_question"
    assert [r.cancelled for r in session.records] == [True]
    assert session.probe_results() == []


def test_an_unlisted_value_takes_the_default_branch(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "2")
    position = session.record_probe(
        probe_node(session), result("env", facts={"env.rank_contract": "complete"})
    )
    assert position.trail[-1].via == "default"
    assert position.node is not None and position.node.id == "dist_probe"


def test_override_forces_another_branch_and_back_undoes_it(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1")
    session.answer("launch_error", "1")
    session.record_probe(probe_node(session), result("net", "fail", {"net.master_port_free": False}))
    choices = {c.value: (c.target, c.found) for c in session.override_choices("port_probe")}
    assert choices == {"true": ("port_where", False), "false": ("D4", True)}

    position = session.override("port_probe", "true")
    assert position.node is not None and position.node.id == "port_where"
    assert position.trail[-1].via == "override"
    position = session.back()
    assert position is not None and position.leaf is not None and position.leaf.id == "D4"


def test_override_choices_offer_default_values_only_when_the_node_has_a_default(
    fixture_kb: KnowledgeBase,
) -> None:
    session = Session(fixture_kb)
    values = [c.value for c in session.override_choices("hang_init")]
    assert values == ["complete", "partial", "absent"]  # complete and absent go to the default


def test_forgetting_a_probe_walks_back_to_its_node(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1")
    session.answer("launch_error", "1")
    session.record_probe(probe_node(session), result("net", facts={"net.master_port_free": True}))
    assert session.position.node is not None and session.position.node.id == "port_where"
    position = session.forget_probe("net")
    assert position.node is not None and position.node.id == "port_probe"


def test_rewind_goes_back_to_a_breadcrumb(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "3")
    session.answer("loader_question", "unknown")
    assert session.position.leaf is not None and session.position.leaf.id == "D9"
    position = session.rewind(1)
    assert position.node is not None and position.node.id == "loader_question"
    assert session.answers == {"what_do_you_see": "3"}


def test_restart_keeps_what_the_probes_found(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "2")
    session.record_probe(probe_node(session), result("env", facts={"env.rank_contract": "partial"}))
    position = session.restart()
    assert position.node is not None and position.node.id == "what_do_you_see"
    assert session.facts == {"env.rank_contract": "partial"}
    session.answer("what_do_you_see", "2")
    assert session.position.leaf is not None and session.position.leaf.id == "D1"
