"""The shipped knowledge base: complete, valid, reachable, and honest about verification."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import REPO, CliResult
from triage.core.model import KnowledgeBase
from triage.kb.sources import read_sources
from triage.kb.validate import check

EXPECTED_IDS = (
    [f"D{i}" for i in range(1, 24)]
    + [f"MN{i}" for i in range(1, 7)]
    + [f"P{i}" for i in range(1, 10)]
    + ["CK1"]
    + [f"X{i}" for i in range(1, 8)]
    + [f"E{i}" for i in range(1, 21)]
)
MUST_NEED_VERIFICATION = ("D9", "D10", "D11", "D14", "D22", "MN5", "MN6", "E5", "E12", "E19")


def test_sources_validate_cleanly() -> None:
    kb, diagnostics = check(read_sources(REPO / "knowledge"))
    assert [d.format() for d in diagnostics] == []
    assert kb is not None


def test_every_seed_item_has_an_entry(kb: KnowledgeBase) -> None:
    assert sorted(kb.entries) == sorted(EXPECTED_IDS)


def test_kinds_follow_the_ids(kb: KnowledgeBase) -> None:
    for entry in kb.entries.values():
        expected = {
            "D": "diagnosis",
            "MN": "diagnosis",
            "P": "technique",
            "CK": "checklist",
            "X": "out-of-scope",
            "E": "diagnosis",
        }
        assert entry.kind == expected[entry.id.rstrip("0123456789")], entry.id


def test_entries_whose_fix_changes_the_science_say_so(kb: KnowledgeBase) -> None:
    for entry_id in MUST_NEED_VERIFICATION:
        verify = kb.entries[entry_id].verify
        assert verify.needed and verify.changes and len(verify.why) > 40, entry_id


def test_out_of_scope_leaves_say_where_to_look(kb: KnowledgeBase) -> None:
    for entry in kb.entries.values():
        if entry.kind == "out-of-scope":
            text = (entry.summary + entry.fix).lower()
            assert "triage" in text and ("not cover" in text or "does not" in text), entry.id


def test_every_entry_has_phrasings_a_root_cause_and_a_fix_with_code(kb: KnowledgeBase) -> None:
    for entry in kb.entries.values():
        assert len(entry.symptoms) >= 6, entry.id
        assert len(entry.root_cause) > 150 and len(entry.fix) > 150, entry.id
        blocks = kb.docs[entry.id]["fix"]
        has_code = any(b["t"] == "code" for b in blocks) or "`" in entry.fix
        assert has_code, entry.id


def test_references_come_from_the_seeds(kb: KnowledgeBase) -> None:
    seed_links = {
        "D4": "pytorch/pytorch/issues/85604",
        "MN1": "crusoecloud",
        "MN5": "ddp_series_fault_tolerance",
    }
    for entry_id, fragment in seed_links.items():
        assert any(fragment in r.url for r in kb.entries[entry_id].references), entry_id


def test_kb_check_passes_including_compiled_freshness(run_cli: Callable[..., CliResult]) -> None:
    result = run_cli("kb", "check")
    assert result.returncode == 0, result.stderr.decode()
    assert b"66 entries" in result.stdout


def test_show_d9_is_a_complete_answer(run_cli: Callable[..., CliResult]) -> None:
    out = run_cli("show", "D9").stdout.decode()
    for part in (
        "Root cause",
        "Fix",
        "DistributedSampler",
        "set_epoch",
        "Join",
        "drop_last",
        "RE-CHECK YOUR EXPERIMENT",
        "Related",
        "D22",
        "References",
        "generic_join",
    ):
        assert part in out, part


def test_new_entries_cite_real_lines_for_every_signature(kb: KnowledgeBase) -> None:
    """E1-E19 and X6 were written with real output for each signature (kb check matches them)."""
    for entry in kb.entries.values():
        if entry.id.startswith("E") or entry.id == "X6":
            for signature in entry.signatures:
                assert signature.examples, (entry.id, signature.pattern)
            assert len(entry.symptoms) >= 8, entry.id


def test_umbrella_nccl_errors_defer_to_their_last_error_line(kb: KnowledgeBase) -> None:
    """ "unhandled system error" names no cause: its signatures are low-weight echoes, and the line
    after "Last error:" is matched by the entry of the real cause."""
    import re

    umbrella = "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5"
    last_error = {
        "Error while creating shared memory segment /dev/shm/nccl-1YsMbG (size 7340384)": "E3",
        "misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory": "E18",
    }
    for entry in kb.entries.values():
        for signature in entry.signatures:
            if re.search(signature.pattern, umbrella, re.IGNORECASE):
                assert signature.echo and signature.weight < 0.5, (entry.id, signature.pattern)
    for line, expected in last_error.items():
        best = max(
            (s.weight, e.id)
            for e in kb.entries.values()
            for s in e.signatures
            if not s.echo and re.search(s.pattern, line, re.IGNORECASE)
        )
        assert best[1] == expected, line
