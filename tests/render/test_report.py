"""The report builder (one for `triage report` and the TUI's `e`) and the first command of a fix:
fixture knowledge, real redaction, a real log scan."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from tests.conftest import REPO, result
from triage.core.inventory import Inventory
from triage.core.logscan.patterns import compile_signatures
from triage.core.logscan.scanner import scan_lines
from triage.core.logscan.verdict import decide
from triage.core.model import KnowledgeBase, ProbeNode
from triage.core.session import Session
from triage.render.report import (
    REPORT_SECTIONS,
    ExtraPart,
    LogPart,
    ReportInput,
    build_report,
    first_command,
    first_shell_command,
    report_filename,
)
from triage.render.verify import verify_headline

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


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.MULTILINE)


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
    inventory = Inventory(
        system="Linux 6.1 x86_64",
        driver="550.54.15",
        gpus=("NVIDIA H100", "NVIDIA H100"),
        topology="GPU0 X NV18\nGPU1 NV18 X",
        settings={"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": f"mlx5_0 {TOKEN}"},
        rank_variables={"MASTER_ADDR": "10.0.0.1"},
        interfaces={"eth0": 9000},
    )
    text = build_report(
        fixture_kb,
        ReportInput(
            when=WHEN,
            host="node1",
            command="`triage` (test)",
            results=session.probe_results(),
            inventory=inventory,
            entry=position.leaf,
            how="Reached by the walk below.",
            trail=position.trail,
            own_words=session.own_words,
            cancelled=["dist"],
        ),
    )
    assert text.startswith("# triage report: D4 The master port is already taken")
    assert "Generated 2026-03-01 12:30 UTC on `node1` by triage" in text
    assert "> **No experiment re-check needed" in text
    assert "1. **What do you see?** It will not start" in text
    assert "(in your words: “it dies at launch, HF_TOKEN=<redacted>" in text
    assert "probe net found `net.master_port_free = false` → D4" in text
    assert TOKEN not in text and "hunter2" not in text
    assert "| `NCCL_DEBUG` | `INFO` |" in text and "2 x NVIDIA H100, driver `550.54.15`" in text
    assert "| `eth0` | 9000 |" in text and "GPU0 X NV18" in text
    assert "the dist probe: cancelled by you" in text
    assert sections(text) == list(REPORT_SECTIONS)
    assert "torchrun --master-port=29501" in text.split("## Fix", 1)[1]
    assert "### Verification" in text and "A different port changes nothing" in text
    assert report_filename("D4", WHEN) == "triage-report-D4-20260301-123000.md"


def test_report_for_an_entry_opened_directly(fixture_kb: KnowledgeBase) -> None:
    text = build_report(
        fixture_kb,
        ReportInput(
            when=WHEN,
            host="h",
            command="x",
            entry=fixture_kb.entries["D9"],
            how="Opened from the search “x”.",
        ),
    )
    assert "No questions were answered: the entry was opened directly." in text
    assert "> **RE-CHECK YOUR EXPERIMENT" in text
    assert sections(text) == list(REPORT_SECTIONS)


def test_a_report_with_nothing_says_what_it_did_not_look_at(fixture_kb: KnowledgeBase) -> None:
    text = build_report(
        fixture_kb,
        ReportInput(
            when=WHEN,
            host="h",
            command="`triage report --no-probes`",
            not_run={"env": "not run (--no-probes)", "gpu": "not run (--no-probes)"},
            inventory_why="--no-probes: this machine was not looked at",
            unseen=["the script train.py: not checked"],
        ),
    )
    assert text.startswith("# triage report: no diagnosis")
    assert "**No diagnosis.**" in text
    assert sections(text) == list(REPORT_SECTIONS)
    unseen = text.split("## What triage could not look at", 1)[1]
    for item in (
        "the env probe: not run (--no-probes)",
        "--no-probes: this machine was not looked at",
        "logs: none given",
        "the script train.py: not checked",
    ):
        assert item in unseen
    assert "*Not looked at: the versions probe did not run" in text


def test_a_log_diagnosis_leads_the_report_with_its_picture(
    fixture_kb: KnowledgeBase, kb: KnowledgeBase
) -> None:
    log = REPO / "tests" / "core" / "logscan" / "data" / "repro-D20.log"
    lines = [(str(log), n, line) for n, line in enumerate(log.read_text().splitlines(), 1)]
    lines.append((str(log), len(lines) + 1, f"[rank0]: wandb: api key {TOKEN}"))
    scan = scan_lines(compile_signatures(kb), lines)
    verdict = decide(scan, kb)
    text = build_report(kb, ReportInput(when=WHEN, host="h", command="x", logs=[LogPart(scan, verdict)]))
    assert text.startswith("# triage report: D20 ")
    assert "(from the log: rank 1 failed first" in text
    logs = text.split("## Logs", 1)[1]
    assert "✗ FIRST FAIL" in logs and "· waited" in logs
    assert "error_file: <N/A>" not in logs.split("Also consistent with")[0]
    assert TOKEN not in text


def test_a_contributed_part_gets_its_section_before_the_last(fixture_kb: KnowledgeBase) -> None:
    part = ExtraPart(
        "Hung job", "Ranks 0-6 wait in `all_reduce`; rank 7 is in `barrier`.", ("X9", "D9"), "from the stacks"
    )
    text = build_report(fixture_kb, ReportInput(when=WHEN, host="h", command="x", extras=[part]))
    assert sections(text) == [*REPORT_SECTIONS[:-1], "Hung job", REPORT_SECTIONS[-1]]
    assert text.startswith("# triage report: D9 ") and "(from the stacks)" in text
