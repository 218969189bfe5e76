"""`ask` reads the domain words by tokens; the docs site by one regex: both readings agree."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO
from triage.core.domain import DomainWords
from triage.core.match_index import domain_pattern
from triage.kb.matching import read_domain

WORDS = read_domain(REPO / "knowledge") or []
TEXTS = [
    "ddp training hangs on 8 gpus",
    "npm install -g nodemon fails",
    "vagrant ssh: connection reset by peer",
    "multi-node job, world size 16",
    "multinode",
    "a multi-nodes setup",  # 'multi-node' is a whole word: no match
    "we fine-tuned it",  # fine-tun* is a prefix
    "refine-tuning",  # ...that needs a boundary before it
    "rtx3090 and 3090 and x3090",
    "frankly, a prank",
    "zero-3 offload",
    "zero-30",
    "the process group was destroyed",
    "process groups",
    "étorch",
    "torch_",
    "",
    "-",
    "mixed precision\n",
    "mixed precisions",
]


def test_the_shipped_words_exist() -> None:
    assert len(WORDS) > 50


@pytest.mark.parametrize("text", TEXTS)
def test_tokens_and_regex_agree(text: str) -> None:
    regex = re.compile(domain_pattern(WORDS))
    assert DomainWords(WORDS).holds(text) == (regex.search(text) is not None), text


def test_each_kind_of_word_is_found() -> None:
    words = DomainWords(["nccl*", "rank", "world size", "fine-tun*"])
    assert words.holds("ncclinternalerror") and words.holds("rank 3") and not words.holds("ranks")
    assert words.holds("the world size is 4") and not words.holds("the world sizes")
    assert words.holds("fine-tuning") and not words.holds("refine-tuning")
