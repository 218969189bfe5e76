"""knowledge/domain.yaml: the words that say a text is about training; a bad file is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO
from triage.core.errors import UserError
from triage.core.match_index import domain_pattern
from triage.kb.matching import read_domain


def test_the_shipped_words_load_and_are_compiled_into_the_index() -> None:
    words = read_domain(REPO / "knowledge")
    assert words is not None and "nccl*" in words and "rank" in words
    import re

    pattern = re.compile(domain_pattern(words))
    assert pattern.search("my torchrun job") and pattern.search("rank 3 hangs")
    assert not pattern.search("frankly, nothing") and not pattern.search("prank")


def test_a_knowledge_without_domain_words_has_none(tmp_path: Path) -> None:
    assert read_domain(tmp_path) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("words: []\n", "needs a `words:` list"),
        ("words: torch\n", "needs a `words:` list"),
        ("- torch\n", "needs a `words:` list"),
        ("words: [3090]\n", "is not a domain word"),
        ("words: ['(a|aa)+$']\n", "is not a domain word"),
        ("words: [Torch]\n", "is not a domain word"),
        ("words: [" + ", ".join(f"w{i}" for i in range(1001)) + "]\n", "1 to 1000 words"),
        ("words: [torch\n", "cannot be read as YAML"),
        (b"\xff\xfe words", "cannot be read as YAML"),
    ],
)
def test_a_bad_domain_file_is_one_clear_error(tmp_path: Path, text: str | bytes, problem: str) -> None:
    path = tmp_path / "domain.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(UserError, match=r"domain\.yaml") as caught:
        read_domain(tmp_path)
    assert problem in str(caught.value)
