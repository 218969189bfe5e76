"""The labelled reports compiled into `ask`'s index come from the corpus's TRAIN split only.

knowledge/reports.yaml (bench/fit_confidence.py) holds real users' descriptions of each entry; the
test split of eval/ measures the engine on reports it has never seen, so no test item, nor any
item of a test thread, may be among them, nor in the compiled index's phrasings.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO
from triage.core.match_index import REPORT_TERMS
from triage.core.matcher import index_for
from triage.core.model import KnowledgeBase
from triage.kb.matching import read_reports


def _bench(name: str) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _corpus() -> ModuleType:
    return _bench("corpus")


def test_reports_are_train_items_and_no_test_item_enters_the_index(kb: KnowledgeBase) -> None:
    corpus = _corpus()
    excerpt = _bench("crossval").excerpt
    reports = read_reports(REPO / "knowledge")
    assert reports, "knowledge/reports.yaml is missing: run bench/fit_confidence.py"
    items = [i for kind in corpus.load_all().values() for i in kind]
    train = {excerpt(i.text) for i in items if i.split == "train"}
    # Two threads may open with the very same error line; only a text no train thread has is test's.
    test_only = {excerpt(i.text) for i in items if i.split == "test"} - train
    assert test_only, "the corpus has no test split"
    for entry_id, texts in reports.items():
        assert entry_id in kb.entries, entry_id
        for text in texts:
            assert text in train, f"not a train item: {text[:80]!r}"
            assert text not in test_only, f"a test item in the index: {text[:80]!r}"
    normalizer = index_for(kb).normalizer
    phrases = index_for(kb).data["phrases"]
    assert isinstance(phrases, dict)
    indexed = {p for ps in phrases.values() for p in ps}

    def terms_of(text: str) -> str:
        return " ".join(sorted(set(normalizer.tokens(text)[:REPORT_TERMS])))

    # a short report may read as the very same few terms as a train one (two Chinese reports whose
    # only known words are "lr", "multigpu" and "singlegpu"): that phrasing is the train report's
    train_terms = {terms_of(t) for t in train}
    for text in test_only:
        terms = terms_of(text)
        assert not terms or terms not in indexed or terms in train_terms or _is_also_a_symptom(kb, terms), (
            text[:80]
        )


def _is_also_a_symptom(kb: KnowledgeBase, terms: str) -> bool:
    """A test report whose terms equal an entry's own title or symptom (not a report) is no leak."""
    normalizer = index_for(kb).normalizer
    own = {
        " ".join(sorted(set(normalizer.tokens(t))))
        for e in kb.entries.values()
        for t in (e.title, *e.symptoms)
    }
    return terms in own


@pytest.mark.parametrize("split", ["train", "test"])
def test_the_split_is_by_thread(split: str) -> None:
    corpus = _corpus()
    items = [i for kind in corpus.load_all().values() for i in kind if i.source != "synthetic"]
    sides: dict[str, set[str]] = {}
    for item in items:
        sides.setdefault(corpus.thread_of(item.source), set()).add(item.split)
    assert all(len(s) == 1 for s in sides.values())
    assert any(s == {split} for s in sides.values())


def test_a_cross_validation_fold_is_ranked_by_an_index_without_its_own_reports(kb: KnowledgeBase) -> None:
    """bench/crossval.py: the train figures are honest only if a fold's reports are not in the
    index that ranks it (the shipped index holds them all)."""
    corpus, crossval = _corpus(), _bench("crossval")
    train = [i for kind in corpus.load_all().values() for i in kind if i.split == "train"]
    held_out = [i for i in train if crossval.fold_of(i) == 0]
    rest = crossval.reports_of(kb, [i for i in train if crossval.fold_of(i) != 0])
    fold_kb = crossval.with_reports(kb, rest)
    normalizer = index_for(fold_kb).normalizer
    phrases = index_for(fold_kb).data["phrases"]
    assert isinstance(phrases, dict)
    indexed = {p for ps in phrases.values() for p in ps}
    others = {crossval.excerpt(i.text) for i in train if crossval.fold_of(i) != 0}
    kept = [
        i
        for i in held_out
        if i.kind == "queries" and i.expect[0] in kb.entries and crossval.excerpt(i.text) not in others
    ]
    assert kept
    for item in kept:
        terms = " ".join(sorted(set(normalizer.tokens(crossval.excerpt(item.text))[:REPORT_TERMS])))
        assert terms not in indexed or _is_also_a_symptom(kb, terms), item.origin
    with pytest.raises(AssertionError):
        crossval.reports_of(kb, [i for kind in corpus.load_all().values() for i in kind if i.split == "test"])


def test_a_fold_leaves_out_the_symptoms_written_from_its_own_items(kb: KnowledgeBase) -> None:
    """bench/crossval.py: a symptom phrasing copied or paraphrased from a train report is that
    report again; the fold that holds the report out ranks it without the phrasing, and keeps the
    phrasings no item of the fold wrote, and a bare error name that many reports quote."""
    corpus, crossval = _corpus(), _bench("crossval")
    item = corpus.Item(
        kind="queries",
        text="Horovod hangs forever at end of epoch: the data loaders of the workers yield different numbers of batches",
        expect=("D9",),
        alternates=(),
        source="https://example.org/thread/1",
        first_rank=None,
        is_log=False,
        origin="test",
    )
    other = item.__class__(**{**item.__dict__, "expect": ("D3",)})  # same words, another entry's label
    symptoms = kb.entries["D9"].symptoms
    copied = [s for s in symptoms if s.startswith("Horovod freezes when the data loaders")]
    assert copied, "D9 lost the symptom this test reads"
    leaked = crossval.written_from(kb, [item])
    assert set(copied) <= leaked["D9"]
    assert "hangs at end of epoch" in symptoms
    assert "hangs at end of epoch" not in leaked["D9"]  # all in the item, but too short to be a paraphrase
    assert len(leaked["D9"]) < len(symptoms) / 2
    assert "D9" not in crossval.written_from(kb, [other])
    fold_kb = crossval.without_symptoms(kb, leaked)
    assert [s for s in fold_kb.entries["D9"].symptoms if s in copied] == []
    assert fold_kb.entries["D3"].symptoms == kb.entries["D3"].symptoms
