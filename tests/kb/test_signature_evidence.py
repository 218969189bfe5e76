"""Signature evidence (knowledge/signature_evidence.yaml, bench/fit_confidence.py): how often each
signature's matches in the labelled TRAIN items were its entry's, and the weight the index gives it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO, CliResult
from tests.kb.test_reports import _bench
from triage.core.errors import UserError
from triage.core.match_index import build_index_data, reliability
from triage.core.model import KnowledgeBase
from triage.kb.matching import read_signature_evidence


def test_reliability_keeps_an_unseen_signature_and_shrinks_one_other_entries_own() -> None:
    assert reliability(0, 0) == 1.0  # no labelled item matched it: nothing to say
    assert reliability(12, 12) == pytest.approx(1.0)  # always its entry's
    assert reliability(9, 2) < 0.15  # "ChildFailedError": 2 of 9 were P4's
    assert reliability(1, 0) > reliability(4, 0) > reliability(13, 1) > 0  # more matches, more sure
    assert reliability(10, 7) == pytest.approx(1.0)  # right as often as a sound signature is


def test_the_index_scales_a_signature_by_its_evidence(kb: KnowledgeBase) -> None:
    entry = kb.entries["P4"]
    signature = entry.signatures[0]
    plain = build_index_data(kb)["signatures"]
    scaled = build_index_data(kb, evidence={"P4": {signature.pattern: (9, 2)}})["signatures"]
    assert isinstance(plain, dict) and isinstance(scaled, dict)
    assert plain["P4"][0][1] == signature.weight
    assert scaled["P4"][0][1] == pytest.approx(signature.weight * reliability(9, 2), abs=1e-4)
    assert scaled["P4"][1:] == plain["P4"][1:] and scaled["D9"] == plain["D9"]  # the others keep theirs


def test_the_shipped_evidence_is_counted_on_train_only(kb: KnowledgeBase) -> None:
    """What the file says is what the train split says; counting the test split is refused."""
    corpus, crossval = _bench("corpus"), _bench("crossval")
    shipped = read_signature_evidence(REPO / "knowledge")
    assert shipped, "knowledge/signature_evidence.yaml is missing: run bench/fit_confidence.py"
    items = [i for kind in corpus.load_all().values() for i in kind]
    assert crossval.signature_evidence(kb, [i for i in items if i.split == "train"]) == shipped
    with pytest.raises(AssertionError):
        crossval.signature_evidence(kb, [i for i in items if i.split == "test" and i.kind == "logs"])
    # the generic lines every failure prints are the ones the evidence shrinks
    child_failed = next(p for p in shipped.get("P4", {}) if "ChildFailedError" in p)
    assert reliability(*shipped["P4"][child_failed]) < 0.5


@pytest.mark.parametrize(
    "text",
    [
        "signatures: [1, 2]\n",
        "signatures:\n  P4:\n  - {pattern: x, matched: 2}\n",
        "signatures:\n  P4:\n  - {pattern: x, matched: 2, right: 3}\n",
        "signatures:\n  P4:\n  - {pattern: x, matched: -1, right: 0}\n",
        "signatures:\n  P4:\n  - {pattern: x, matched: true, right: 0}\n",
        "signatures: {P4: [{pattern: [a], matched: 1, right: 0}]}\n",
        "\x00\xff not yaml: [",
    ],
)
def test_a_malformed_evidence_file_is_one_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "signature_evidence.yaml").write_bytes(text.encode("latin-1"))
    with pytest.raises(UserError, match=r"signature_evidence\.yaml"):
        read_signature_evidence(tmp_path)
    assert read_signature_evidence(tmp_path / "none") is None


def test_kb_build_with_a_hostile_evidence_file_exits_2(
    tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    import shutil

    root = tmp_path / "kb"
    shutil.copytree(REPO / "tests" / "fixtures" / "kb" / "minimal", root)
    (root / "signature_evidence.yaml").write_text(
        "signatures:\n  D1:\n  - {pattern: x, matched: 1, right: 5}\n"
    )
    result = run_cli("--kb", str(root), "kb", "build")
    err = result.stderr.decode()
    assert result.returncode == 2 and "signature_evidence.yaml" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
