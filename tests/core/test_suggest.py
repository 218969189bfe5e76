"""How the search box orders options and entries for the user's own words (fixture graph, real matcher)."""

from __future__ import annotations

from triage.core.model import KnowledgeBase, QuestionNode
from triage.core.suggest import suggest


def question(kb: KnowledgeBase, node_id: str) -> QuestionNode:
    node = kb.graph.nodes[node_id]
    assert isinstance(node, QuestionNode)
    return node


def test_at_the_start_a_strong_entry_match_comes_first(fixture_kb: KnowledgeBase) -> None:
    found = suggest(
        fixture_kb, question(fixture_kb, "what_do_you_see"), "all processes end up on GPU 0", at_start=True
    )
    assert found.first is not None and found.first.kind == "entry" and found.first.entry_id == "D3"
    assert any(item.kind == "option" and item.option == 3 for item in found.items)
    assert not found.different_symptom


def test_a_pasted_error_is_matched_by_its_signature(fixture_kb: KnowledgeBase) -> None:
    trace = (
        'Traceback (most recent call last):\n  File "train.py", line 40, in <module>\n'
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running all_reduce\n"
    )
    found = suggest(fixture_kb, question(fixture_kb, "what_do_you_see"), trace, at_start=True)
    assert found.first is not None and found.first.entry_id == "D19"
    assert any("error text matches" in reason for reason in found.first.reasons)


def test_mid_walk_words_that_fit_an_option_answer_it(fixture_kb: KnowledgeBase) -> None:
    found = suggest(fixture_kb, question(fixture_kb, "launch_error"), "errno 98", at_start=False)
    assert found.first is not None and found.first.kind == "option" and found.first.option == 0


def test_mid_walk_words_about_another_problem_name_suspects(fixture_kb: KnowledgeBase) -> None:
    found = suggest(
        fixture_kb, question(fixture_kb, "launch_error"), "all ranks end up on gpu 0", at_start=False
    )
    assert found.different_symptom
    assert [e.entry_id for e in found.entries][:1] == ["D3"]
    assert all(item.kind == "entry" for item in found.items)


def test_blank_text_suggests_nothing(fixture_kb: KnowledgeBase) -> None:
    found = suggest(fixture_kb, None, "   ", at_start=True)
    assert found.items == () and found.first is None


def test_close_entries_come_with_the_question_that_separates_them(kb: KnowledgeBase) -> None:
    found = suggest(kb, question(kb, "what_do_you_see"), "ddp got stuck", at_start=True)
    assert found.question is not None
    node = kb.graph.nodes[found.question.node]
    assert isinstance(node, QuestionNode) and found.question.prompt == node.prompt
    assert [entry for _, entry in found.question.options] == [e.entry_id for e in found.entries[:2]]


def test_words_that_name_nothing_suggest_no_entries(kb: KnowledgeBase) -> None:
    """The shipped knowledge: "hello, anyone there?" holds no word of any entry, so the box offers
    none of them (they would be guesses); a vague symptom still names its candidates."""
    assert suggest(kb, None, "hello, anyone there?", at_start=True).entries == ()
    assert suggest(kb, None, "the job hangs", at_start=True).entries
