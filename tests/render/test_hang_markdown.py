"""The hang picture as Markdown for `triage report`: the verdict, a row per group with the suspects
marked, what the job recorded, the diagnosis with its evidence; redacted; valid Markdown."""

from __future__ import annotations

from dataclasses import replace

from markdown_it import MarkdownIt

from tests.core.hang.test_hang_analysis import _collective, _sample
from triage.core.hang.analyse import analyse
from triage.core.hang.stacks import LineContext
from triage.core.model import KnowledgeBase
from triage.render.hang_text import hang_markdown

TOKEN = "hf_" + "a1B2c3D4e5F6g7H8i9J0k1L2"


def test_the_picture_reads_as_markdown_with_the_suspect_marked(kb: KnowledgeBase) -> None:
    picture = analyse([_sample(0, *_collective("barrier", 8)), _sample(1, *_collective("all_reduce", 13))])
    lines = hang_markdown(kb, replace(picture, recorded=("rank 0 waits in barrier #1",)))
    text = "\n".join(lines)
    assert lines[0].startswith("**Verdict:** rank 0 is in a collective that only some ranks reach")
    row = next(line for line in lines if line.startswith("| 0 (suspect) |"))
    assert "waiting in barrier()" in row and "`dist.barrier()`" in row
    assert "- rank 0 waits in barrier #1" in lines
    assert any(line.startswith("**Diagnosis:** D21 ") for line in lines)
    tokens = MarkdownIt().enable("table").parse(text)
    assert sum(t.type == "tr_open" for t in tokens) == 3  # the header and one row per group


def test_secrets_in_code_and_notes_are_redacted(kb: KnowledgeBase) -> None:
    picture = analyse([_sample(0, *_collective("barrier", 8)), _sample(1, *_collective("all_reduce", 13))])
    group = picture.groups[0]
    leaked = replace(group.state, context=LineContext(code=f"login(token='{TOKEN}')  # a | pipe"))
    picture = replace(picture, groups=(replace(group, state=leaked), *picture.groups[1:]),
                      notes=(f"HF_TOKEN={TOKEN} in the job's environment",))  # fmt: skip
    text = "\n".join(hang_markdown(kb, picture))
    assert TOKEN not in text and "<redacted>" in text.replace("&lt;", "<")
    assert "\\|" in text  # a pipe in code does not break the table
