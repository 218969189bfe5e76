"""Cross-validation on the corpus's TRAIN split, for an index that holds the train reports.

The shipped index compiles the labelled train queries into the knowledge (knowledge/reports.yaml)
as further phrasings of each entry's symptoms. Scoring a train item against that index would find
the item itself; so train figures come from K folds instead: each fold's items are ranked by an
index built from the other folds' reports only, as an unseen report is ranked by the shipped one.
Folds go by thread (like the split), so every item of one thread is held out together.
Shared by bench/bench_eval.py (train figures) and bench/fit_confidence.py (the model's fit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from corpus import Item, thread_of

from triage.core.model import KnowledgeBase

FOLDS = 5
REPORT_CHARS = 600  # a report's lead is kept (the index reads its first terms only)


def fold_of(item: Item) -> int:
    key = item.text if item.source.strip() == "synthetic" else "cv:" + thread_of(item.source.strip())
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % FOLDS


def excerpt(text: str) -> str:
    """A report's lead, cut at a word boundary."""
    if len(text) <= REPORT_CHARS:
        return text
    cut = text[:REPORT_CHARS]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def reports_of(kb: KnowledgeBase, items: Iterable[Item]) -> dict[str, list[str]]:
    """Entry id -> the train queries labelled with it (their first label), as the index takes them.
    Only train items are ever taken: the test split must never enter the index."""
    reports: dict[str, list[str]] = {}
    for item in items:
        assert item.split == "train", "a test item must never enter the index"
        if item.kind == "queries" and item.expect and item.expect[0] in kb.entries:
            reports.setdefault(item.expect[0], []).append(excerpt(item.text))
    return reports


def with_reports(
    kb: KnowledgeBase, reports: Mapping[str, Sequence[str]], confidence: Mapping[str, float] | None = None
) -> KnowledgeBase:
    """The knowledge base with its index rebuilt from these reports (and this confidence model)."""
    from triage.core.match_index import build_index_data, compact_index
    from triage.core.matcher import index_for
    from triage.kb.matching import english_zipf

    model = confidence if confidence is not None else index_for(kb).confidence._asdict()
    data = build_index_data(kb, english_zipf(), model, reports)
    return kb._replace(match_index=compact_index(data))


def fold_kbs(
    kb: KnowledgeBase, train: Sequence[Item], confidence: Mapping[str, float] | None = None
) -> list[KnowledgeBase]:
    """For each fold, the knowledge base whose index holds the other folds' reports."""
    return [
        with_reports(kb, reports_of(kb, [i for i in train if fold_of(i) != fold]), confidence)
        for fold in range(FOLDS)
    ]
