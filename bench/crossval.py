"""Cross-validation on the corpus's TRAIN split, for an index that holds the train reports.

The shipped index compiles the labelled train queries into the knowledge (knowledge/reports.yaml)
as further phrasings of each entry's symptoms. Scoring a train item against that index would find
the item itself; so train figures come from K folds instead: each fold's items are ranked by an
index built from the other folds' reports only, as an unseen report is ranked by the shipped one.
Folds go by thread (like the split), so every item of one thread is held out together.

Some of the entries' own symptom phrasings were written from train threads too (users' words, taken
from the thread they describe). Left in, a held-out item meets a paraphrase of itself and CV reads
too high, most of all for the confidence model fitted on it. So a fold's index also leaves out every
symptom that looks written from one of the fold's items (labelled with that entry): most of the
symptom's term weight is in the item (LEAK_SHARE) and it is more than a bare error line's few
words (LEAK_TERMS). A generic phrasing that every report of an entry repeats goes with it, so CV
reads, if anything, a little low; test and unseen reports are ranked by the whole knowledge.
Shared by bench/bench_eval.py (train figures) and bench/fit_confidence.py (the model's fit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence

from corpus import Item, thread_of

from triage.core.match_index import Evidence
from triage.core.model import KnowledgeBase

FOLDS = 5
REPORT_CHARS = 600  # a report's lead is kept (the index reads its first terms only)
LEAK_SHARE = 0.6  # a symptom with this share of its term weight in an item was written from it
LEAK_TERMS = 3  # ... when it has at least this many terms (a bare error name is not a paraphrase)


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
    kb: KnowledgeBase,
    reports: Mapping[str, Sequence[str]],
    confidence: Mapping[str, float] | None = None,
    evidence: Evidence | None = None,
) -> KnowledgeBase:
    """The knowledge base with its index rebuilt from these reports (and this confidence model, and
    this signature evidence)."""
    from triage.core.match_index import build_index_data, compact_index
    from triage.core.matcher import index_for
    from triage.kb.matching import english_zipf

    model = confidence if confidence is not None else index_for(kb).confidence._asdict()
    words = (kb.match_index or {}).get("domain_words")  # the domain words, as compiled
    data = build_index_data(
        kb, english_zipf(), model, reports, words if isinstance(words, list) else None, evidence
    )
    return kb._replace(match_index=compact_index(data))


EVIDENCE_CHARS = 200_000  # the start of an item searched for signatures (pastes can be long)


def signature_evidence(kb: KnowledgeBase, items: Iterable[Item]) -> dict[str, dict[str, tuple[int, int]]]:
    """Entry id -> pattern -> (how many of these labelled train queries and logs the signature
    matches, how many of those are its entry's). An item labelled `none` is nobody's. Only train
    items are ever counted: the test split must never shape the index."""
    import re

    from triage.core.safe_regex import bounded

    labelled = [i for i in items if i.kind in ("queries", "logs")]
    assert all(i.split == "train" for i in labelled), "a test item must never shape the index"
    texts = [(i.text[:EVIDENCE_CHARS], i.accepted) for i in labelled]
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for entry in kb.entries.values():
        for signature in entry.signatures:
            try:
                regex = re.compile(bounded(signature.pattern), re.IGNORECASE | re.MULTILINE)
            except re.error:
                continue
            hits = [accepted for text, accepted in texts if regex.search(text)]
            if hits:
                right = sum(entry.id in accepted for accepted in hits)
                out.setdefault(entry.id, {})[signature.pattern] = (len(hits), right)
    return out


def written_from(kb: KnowledgeBase, items: Iterable[Item]) -> dict[str, set[str]]:
    """Entry id -> its symptoms that look written from one of these items (labelled with it)."""
    from triage.core.matcher import index_for

    index = index_for(kb)

    def weights(text: str) -> dict[str, float]:
        out = {}
        for term in index.normalizer.tokens(text):
            posting = index.posting(term)
            out[term] = posting.weight if posting is not None else 0.0
        return out

    labelled = [(i.accepted, set(index.normalizer.tokens(i.text))) for i in items if i.kind == "queries"]
    leaked: dict[str, set[str]] = {}
    for entry in kb.entries.values():
        for symptom in entry.symptoms:
            terms = weights(symptom)
            total = sum(terms.values())
            if len(terms) < LEAK_TERMS or total <= 0:
                continue
            for accepted, seen in labelled:
                if entry.id in accepted and sum(terms[t] for t in seen & terms.keys()) >= LEAK_SHARE * total:
                    leaked.setdefault(entry.id, set()).add(symptom)
                    break
    return leaked


def without_symptoms(kb: KnowledgeBase, leaked: Mapping[str, set[str]]) -> KnowledgeBase:
    """The knowledge base with these symptoms taken out of their entries."""
    entries = {
        key: entry._replace(symptoms=tuple(s for s in entry.symptoms if s not in leaked.get(entry.id, ())))
        for key, entry in kb.entries.items()
    }
    return kb._replace(entries=entries)


def fold_kbs(
    kb: KnowledgeBase, train: Sequence[Item], confidence: Mapping[str, float] | None = None
) -> list[KnowledgeBase]:
    """For each fold, the knowledge base whose index holds the other folds' reports and signature
    evidence and none of the symptoms written from the fold's own items."""
    out = []
    for fold in range(FOLDS):
        held_out = [i for i in train if fold_of(i) == fold]
        rest = [i for i in train if fold_of(i) != fold]
        out.append(
            with_reports(
                without_symptoms(kb, written_from(kb, held_out)),
                reports_of(kb, rest),
                confidence,
                signature_evidence(kb, rest),
            )
        )
    return out
