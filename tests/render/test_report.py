"""The session report and the first command of a fix (fixture knowledge, real redaction)."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.conftest import result
from triage.core.model import KnowledgeBase, ProbeNode
from triage.core.session import Session
from triage.render.report import (
    build_report,
    first_command,
    first_shell_command,
    report_filename,
    verify_headline,
)

TOKEN = "hf_" + "q" * 30
WHEN = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def test_first_command_is_the_first_command_of_the_first_code_block(fixture_kb: KnowledgeBase) -> None:
    assert (
        first_command(fixture_kb, fixture_kb.entries["D4"])
        == "torchrun --master-port=29501 --nproc-per-node=2 train.py"
    )
    # D3's first block is shell with a trailing aligned comment
    assert first_command(fixture_kb, fixture_kb.entries["D3"]) == "export LOCAL_RANK=0"
    # a Python snippet inside a numbered list is copied whole
    assert first_command(fixture_kb, fixture_kb.entries["D9"]) == (
        'print(f"rank {dist.get_rank()}: {len(train_loader)} batches", flush=True)'
    )


def test_first_shell_command_skips_comments_and_joins_continuations() -> None:
    snippet = "# see who holds the port\n$ ss -ltnp 'sport = :29500'   # or lsof\nnvidia-smi\n"
    assert first_shell_command(snippet) == "ss -ltnp 'sport = :29500'"
    assert first_shell_command("torchrun \\\n  --nproc-per-node=2 \\\n  train.py\nnext") == (
        "torchrun --nproc-per-node=2 train.py"
    )
    assert first_shell_command("# only a comment\n\n") is None


def test_verify_headline_names_what_changes(fixture_kb: KnowledgeBase) -> None:
    assert verify_headline(fixture_kb.entries["D9"]).startswith(
        "RE-CHECK YOUR EXPERIMENT: this fix changes the data order"
    )
    assert verify_headline(fixture_kb.entries["D4"]).startswith("No experiment re-check needed")


def test_report_holds_the_walk_the_evidence_redacted_and_the_fix(fixture_kb: KnowledgeBase) -> None:
    session = Session(fixture_kb)
    session.answer("what_do_you_see", "1", own_words=f"it dies at launch, HF_TOKEN={TOKEN}")
    session.answer("launch_error", "1")
    node = session.position.node
    assert isinstance(node, ProbeNode)
    net = result(
        "net",
        "fail",
        {"net.master_port_free": False},
        f"port 29500 held; env had HF_TOKEN={TOKEN}",
        [("env | grep -i token", f"HF_TOKEN={TOKEN}\nhttps://user:hunter2@example.com/repo")],
    )
    position = session.record_probe(node, net)
    assert position.leaf is not None
    text = build_report(
        fixture_kb,
        position.leaf,
        trail=position.trail,
        results=session.probe_results(),
        facts=session.facts,
        own_words=session.own_words,
        cancelled=["dist"],
        when=WHEN,
    )
    assert text.startswith("# triage report: D4 The master port is already taken")
    assert "Generated 2026-03-01 12:30 UTC by triage" in text
    assert "> **No experiment re-check needed" in text
    assert "1. **What do you see?** It will not start" in text
    assert "(in your words: “it dies at launch, HF_TOKEN=<redacted>”)" in text
    assert (
        "3. Checking whether the master port is free on this machine: probe net found `net.master_port_free = false` → D4"
        in text
    )
    assert "### net: fail (0.2 s)" in text and "Cancelled by you: dist." in text
    assert TOKEN not in text and "hunter2" not in text
    assert text.count("<redacted>") >= 4
    assert "### Fix" in text and "torchrun --master-port=29501" in text
    assert "### Verification" in text and "A different port changes nothing" in text
    assert report_filename("D4", WHEN) == "triage-report-D4-20260301-123000.md"


def test_report_for_an_entry_opened_directly(fixture_kb: KnowledgeBase) -> None:
    text = build_report(
        fixture_kb,
        fixture_kb.entries["D9"],
        trail=(),
        results=(),
        facts={},
        how="Opened from the search “x”.",
        when=WHEN,
    )
    assert "No questions were answered: the entry was opened directly." in text
    assert "No probe ran in this session." in text
    assert "> **RE-CHECK YOUR EXPERIMENT" in text
