"""The one free-text policy the app and `triage walk` share (triage.core.suggest.reply)."""

from __future__ import annotations

from triage.core.model import KnowledgeBase, QuestionNode
from triage.core.suggest import reply, suggest


def _start(kb: KnowledgeBase) -> QuestionNode:
    node = kb.graph.nodes[kb.graph.start]
    assert isinstance(node, QuestionNode)
    return node


def test_words_that_fit_an_option_answer_the_question(kb: KnowledgeBase) -> None:
    node = _start(kb)
    text = "it freezes at the end of the epoch"
    found = suggest(kb, node, text, at_start=False)
    what = reply(found, text, chosen=found.first, explicit=False, mid_walk=True, can_answer=True)
    assert what.action == "answer" and what.option is not None
    assert node.options[what.option].target.startswith("hang_end")
    assert what.message.startswith("Taking that as: ")


def test_a_clear_error_at_the_start_opens_its_entry(kb: KnowledgeBase) -> None:
    text = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one"
    )
    found = suggest(kb, _start(kb), text, at_start=True)
    what = reply(found, text, chosen=found.first, explicit=False, mid_walk=False, can_answer=True)
    assert what.action == "open" and what.entry_id is not None


def test_mid_walk_another_problem_names_the_suspects(kb: KnowledgeBase) -> None:
    text = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one"
    )
    found = suggest(kb, _start(kb), text, at_start=False)
    entries = found.entries
    what = reply(found, text, chosen=entries[0], explicit=False, mid_walk=True, can_answer=True)
    assert what.action == "suspect" and what.suspects and "does not fit this question" in what.message


def test_nonsense_is_said_plainly(kb: KnowledgeBase) -> None:
    text = "zzqx blorp"
    found = suggest(kb, _start(kb), text, at_start=False)
    what = reply(found, text, chosen=found.first, explicit=False, mid_walk=True, can_answer=True)
    assert what.action == "none" and "could not match" in what.message


def test_a_report_too_weak_to_answer_gets_its_two_candidates_and_their_question(kb: KnowledgeBase) -> None:
    # where no option of a question takes the words (at a question, "froze mid-run" answers it)
    text = "training freezes after a few hundred steps on 8 GPUs"
    found = suggest(kb, None, text, at_start=True)
    assert found.verdict == "no_match" and found.question is not None
    what = reply(found, text, chosen=found.first, explicit=False, mid_walk=False, can_answer=False)
    assert what.action == "suspect"
    candidates = [entry_id for _, entry_id in found.question.options]
    assert [s.entry_id for s in what.suspects] == candidates
    assert found.question.prompt in what.message
    assert all(f"→ {entry_id}" in what.message for entry_id in candidates)
