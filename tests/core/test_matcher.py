"""Matcher behaviour on the real knowledge: signatures, honesty about no match, calibration."""

from __future__ import annotations

import pytest

from triage.core.matcher import rank, rank_options
from triage.core.model import KnowledgeBase, QuestionNode
from triage.core.regex_literals import required_literal


@pytest.mark.parametrize(
    "text",
    [
        "how do I bake sourdough bread",
        "how to center a div in css",
        "git rebase interactive squash commits",
        "hello",
    ],
)
def test_off_topic_questions_are_not_guessed(kb: KnowledgeBase, text: str) -> None:
    match = rank(kb, text)
    assert match.verdict == "no_match", [(h.entry.id, h.score) for h in match.hits]


def test_pasted_error_line_wins_over_words(kb: KnowledgeBase) -> None:
    paste = (
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. "
        "This error indicates that your module has parameters that were not used in producing loss."
    )
    match = rank(kb, paste)
    assert match.best is not None and match.best.entry.id == "D8"
    assert match.best.score > 0.9
    assert any("error text matches" in r for r in match.best.reasons)


def test_out_of_scope_problem_gets_an_honest_leaf(kb: KnowledgeBase) -> None:
    match = rank(kb, "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.")
    assert match.verdict == "out_of_scope"
    assert match.best is not None and not match.best.entry.covered


def test_scores_are_calibrated_not_saturated(kb: KnowledgeBase) -> None:
    match = rank(kb, "ddp hangs")
    scores = [h.score for h in match.hits]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)
    assert scores[0] < 0.95  # two words cannot make triage certain


def test_vocabulary_joins_user_words_to_entry_words(kb: KnowledgeBase) -> None:
    # "frozen" and "last batch" are vocabulary variants of "hang" and "epochend".
    match = rank(kb, "everything is frozen on the last batch")
    assert match.best is not None and match.best.entry.id in ("D9", "D22")


def test_free_text_answer_picks_the_right_option(kb: KnowledgeBase) -> None:
    node = kb.graph.nodes["what_do_you_see"]
    assert isinstance(node, QuestionNode)
    best_index, score = rank_options(node, "it freezes at the end of the epoch", kb)[0]
    assert node.options[best_index].target == "hang_end_lint" and score > 0.5


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"errno:? 98", "errno"),
        (r"DataLoader worker \(pid \d+\) is killed", "dataloader worker (pid "),
        (r"a|b", None),
        (r"Watchdog caught collective operation timeout", "watchdog caught collective operation timeout"),
    ],
)
def test_required_literal_is_a_safe_prefilter(pattern: str, literal: str | None) -> None:
    assert required_literal(pattern) == literal
