"""`triage ask` leads with the verdict, the verification banner and the fix, in one screen."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import CliResult
from triage.core.model import KnowledgeBase
from triage.render.answer import SCREEN_ROWS, answer_lines
from triage.render.terminal import Style
from triage.render.verify import verify_headline

Run = Callable[..., CliResult]
PLAIN = Style(color=False, width=100)


def test_every_entry_answers_within_a_screen_with_the_banner_before_the_fix(kb: KnowledgeBase) -> None:
    entries = list(kb.entries.values())
    for entry in entries:
        others = [(e, 0.5) for e in entries if e is not entry][:3]
        lines = answer_lines(kb, entry, 0.9, "match", others, PLAIN)
        assert len(lines) <= SCREEN_ROWS, (entry.id, len(lines))
        assert lines[0].startswith(("Best match (0.90): ", "Out of scope (0.90): ")) and entry.id in lines[0]
        banner = verify_headline(entry)[:40]  # the one wording (triage/render/verify.py)
        assert banner in lines[1] or banner in lines[2], entry.id  # right under the verdict (1-2 lines)
        assert "Fix" in lines, entry.id
        fix_at = lines.index("Fix")
        assert fix_at < 12 and lines[fix_at + 1].strip(), entry.id
        # a long fix is cut with the command that shows the rest
        full_fix = answer_lines(kb, entry, 0.9, "match", others, PLAIN, full=True)
        if len(full_fix) > len(lines):
            assert any(f"triage show {entry.id}" in line for line in lines), entry.id


def test_full_has_the_cause_the_whole_fix_and_related(kb: KnowledgeBase) -> None:
    entry = kb.entries["D9"]
    lines = answer_lines(kb, entry, 0.9, "match", [], PLAIN, full=True)
    text = "\n".join(lines)
    assert "Root cause" in text and "Related" in text
    assert "Join" in text  # the last step of D9's fix
    assert text.index(verify_headline(entry)[:40]) < text.index("Fix") < text.index("Root cause")


class Question:
    """The shape of the engine's separating question (node, prompt, options)."""

    node = "hang_end"
    prompt = "Where does it hang?"
    options = (("At the very last batch", "D9"), ("Right after a save", "D21"))


def test_a_close_call_shows_the_question_that_separates_the_answers(kb: KnowledgeBase) -> None:
    lines = answer_lines(
        kb, kb.entries["D9"], 0.6, "match", [(kb.entries["D21"], 0.58)], PLAIN, question=Question()
    )
    text = "\n".join(lines)
    assert "Close call between D9 and D21" in text
    assert "“At the very last batch” → D9" in text and "“Right after a save” → D21" in text
    assert "hang_end" not in text  # the question's words, never its internal id
    assert len(lines) <= SCREEN_ROWS


@pytest.mark.parametrize(
    "query", ["hangs at end of epoch", "Expected to have finished reduction in the prior iteration"]
)
def test_ask_default_fits_a_screen_and_brief_keeps_the_verify_marker(run_cli: Run, query: str) -> None:
    out = run_cli("ask", query).stdout.decode().splitlines()
    assert len(out) <= SCREEN_ROWS
    assert any("experiment" in line.lower() for line in out[1:3])
    brief = run_cli("ask", "--brief", "hangs at end of epoch").stdout.decode()
    d9 = next(line for line in brief.splitlines() if line.strip().startswith("D9 "))
    assert "[verify]" in d9
    full = run_cli("ask", "--full", "hangs at end of epoch").stdout.decode()
    assert "Root cause" in full and len(full.splitlines()) > SCREEN_ROWS


CLOSE_CALLS = [
    "NCCL timeout",
    "training hangs",
    "job stuck",
    "hangs at the first collective",
    "nodes cannot connect",
]


def test_the_engines_separating_question_is_shown_in_its_words(run_cli: Run, kb: KnowledgeBase) -> None:
    from triage.core.matcher import rank

    close = [q for q in CLOSE_CALLS if rank(kb, q).question is not None]
    assert close, "none of the close calls gets a separating question any more"
    question = rank(kb, close[0]).question
    assert question is not None
    out = run_cli("ask", close[0]).stdout.decode()
    assert "The question that separates them:" in out
    assert question.prompt in out
    for label, entry_id in question.options:
        assert f"“{label}” → {entry_id}" in out
    assert question.node not in out  # the words, never the node id
    assert len(out.splitlines()) <= SCREEN_ROWS


def test_a_text_that_names_nothing_gets_no_guesses_and_no_question(run_cli: Run) -> None:
    """ "hi there, can you help me?" holds no word of any entry: ask says the text names nothing it
    knows, lists no entries and asks no question; a vague text that names a symptom still gets
    its candidates and the question that separates them."""
    import json

    text = "hi there, can you help me with something?"
    result = run_cli("ask", text)
    out = result.stdout.decode()
    assert result.returncode == 1
    assert out.startswith("Nothing in this text points to a failure triage knows.")
    assert "Closest entries" not in out and "Close call" not in out
    payload = json.loads(run_cli("ask", "--json", text).stdout)
    assert payload["evidence"] is False and payload["question"] is None and payload["best"] is None
    vague = run_cli("ask", "DDP stuck After epoch 0, epoch 1 was stuck.").stdout.decode()
    assert "Closest entries, for what they are worth:" in vague
    assert "The question that separates them:" in vague


def test_an_abstention_on_a_report_asks_its_question_and_a_vague_word_does_not(run_cli: Run) -> None:
    """No answer, but a report about the domain: its two best entries and the question between
    them, headed "Not sure"; a bare complaint ("it does not work") gets neither."""
    import json

    report = "training freezes after a few hundred steps on 8 GPUs"
    payload = json.loads(run_cli("ask", "--json", report).stdout)
    assert payload["verdict"] == "no_match" and payload["question"] is not None
    out = run_cli("ask", report).stdout.decode()
    ids = " and ".join(answer["id"] for answer in payload["question"]["answers"])
    assert f"Not sure between {ids}. The question that separates them:" in out
    vague = json.loads(run_cli("ask", "--json", "it does not work").stdout)
    assert vague["verdict"] == "no_match" and vague["question"] is None
