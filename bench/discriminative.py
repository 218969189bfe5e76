"""Experiment: a discriminative ranker (multinomial logistic regression) blended with `ask`'s lexical score.

    python bench/discriminative.py            # CV grid on train (needs numpy; never read at ask time)

Mechanism tried: a softmax model over the matcher's own query terms (query_terms: normalised,
stemmed terms and adjacent pairs, each weighted by the index's term weight, the title factor and
the lead decay; the vector L2-normalised), one weight vector per entry, fitted with a strong L2
penalty on each entry's phrasings (title, summary, symptoms, signature examples) and the labelled
train reports. At rank time: score = lexical raw + LAMBDA * (model's probability, or its
log-probability less the best entry's). Measured with the same honest 5-fold CV as bench_eval
(bench/crossval.py): each fold's model and index are built without that fold's reports and without
the symptoms written from them; the fold's train queries are then ranked.

Result (2026-11-23, 310 train queries, 5-fold CV; a point is 3 queries; lexical alone = lambda 0):

    lexical alone (shipped)             ranked top-1 74.2 %  top-3 90.0 %
    model alone, l2 1e-5 / 1e-4         ranked top-1 73.5 % / 73.9 % (mean top probability 0.2)
    blend, l2 1e-5, prob, lambda 0.1..4 ranked top-1 74.2-74.8 %  top-3 89.7-91.0 %
    blend, l2 1e-5, logp, lambda 0.1..4 ranked top-1 73.5-74.2 %  top-3 90.3-91.0 %
    blend, l2 1e-4, prob, lambda 0.1..4 ranked top-1 74.2-75.2 %  top-3 90.0-91.0 %
    blend, l2 1e-4, logp, lambda 0.1..4 ranked top-1 73.5-74.2 %  top-3 90.0-91.0 %
    (stronger penalties give flatter models still; their runs were not finished for lack of time)
    fitted further (RATE 2, STEPS 700, l2 1e-5; mean top probability 0.48):
      model alone                       ranked top-1 74.2 %
      blend, prob, lambda 0.3 / 1 / 2   ranked top-1 74.5 / 74.5 / 74.8 %  top-3 90.6 / 90.6 / 91.3 %
      blend, logp, lambda 0.3 / 1 / 2   ranked top-1 74.5 / 74.8 / 74.5 %  top-3 91.3 / 91.0 / 90.6 %

The best cell of the grid (+1.0 point, 3 queries) is the maximum of ~50 cells picked on the same
CV, i.e. noise; the brief's bar was >= 2 points. The model learnt from the labelled data ranks as
well as the hand-built index on its own, but its errors are the index's errors: both read the same
words, and a report whose words point to another entry misleads a learnt weight as it does a
hand-set one. Not adopted: no engine change, the confidence model was not refitted (nothing in the
ranking moved), and test was not read for it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import numpy as np  # noqa: E402
from corpus import Item, load_all, names_right  # noqa: E402
from crossval import FOLDS, excerpt, fold_kbs, fold_of, reports_of  # noqa: E402

from triage.core.model import KnowledgeBase  # noqa: E402

L2_GRID = (1e-5, 1e-4, 1e-3)  # L2 penalty on the weights, against the mean loss per sample
LAMBDAS = (0.0, 0.1, 0.3, 0.6, 1.0, 2.0, 4.0)
REPORT_SAMPLE_WEIGHT = 1.0
RATE, STEPS = 1.0, 300  # gradient descent (momentum 0.9): the fit stops short of the optimum


def vector(kb: KnowledgeBase, text: str) -> dict[str, float]:
    """The matcher's weighted query terms, L2-normalised."""
    from triage.core.matcher import index_for, query_terms

    terms, _ = query_terms(index_for(kb), text)
    norm = sum(v * v for v in terms.values()) ** 0.5 or 1.0
    return {t: v / norm for t, v in terms.items()}


def phrasings(kb: KnowledgeBase) -> list[tuple[str, str, float]]:
    """(entry id, text, sample weight) for every entry's own phrasings."""
    out = []
    for entry in kb.entries.values():
        for text in (entry.title, entry.summary, *entry.symptoms):
            out.append((entry.id, text, 1.0))
        for sig in entry.signatures:
            out += [(entry.id, t, 0.5) for t in sig.examples]
    return out


class Sparse:
    """A sparse matrix (COO) with the two products the fit needs."""

    def __init__(self, rows: list[dict[int, float]], width: int) -> None:
        self.r = np.array([n for n, row in enumerate(rows) for _ in row], dtype=np.int64)
        self.c = np.array([c for row in rows for c in row], dtype=np.int64)
        self.v = np.array([v for row in rows for v in row.values()])
        self.shape = (len(rows), width)

    def dot(self, w: np.ndarray) -> np.ndarray:
        out = np.zeros((self.shape[0], w.shape[1]))
        starts = np.flatnonzero(np.r_[True, self.r[1:] != self.r[:-1]])
        out[self.r[starts]] = np.add.reduceat(self.v[:, None] * w[self.c], starts, axis=0)
        return out

    def tdot(self, g: np.ndarray) -> np.ndarray:
        order = np.argsort(self.c, kind="stable")
        c = self.c[order]
        starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
        out = np.zeros((self.shape[1], g.shape[1]))
        out[c[starts]] = np.add.reduceat((self.v[order, None] * g[self.r[order]]), starts, axis=0)
        return out


def fit_softmax(x: Sparse, y: np.ndarray, w: np.ndarray, classes: int, l2: float) -> np.ndarray:
    """Multinomial logistic regression (no bias: an entry's prior must not come from how many
    reports it happens to have), full-batch gradient descent with Nesterov momentum."""
    n, d = x.shape
    weights = np.zeros((d, classes))
    velocity = np.zeros_like(weights)
    onehot = np.zeros((n, classes))
    onehot[np.arange(n), y] = 1.0
    total = w.sum()
    for _ in range(STEPS):
        ahead = weights + 0.9 * velocity
        z = x.dot(ahead)
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        grad = x.tdot((p - onehot) * w[:, None]) / total + l2 * ahead
        velocity = 0.9 * velocity - RATE * grad
        weights = weights + velocity
    return weights


class Fold(NamedTuple):
    ids: list[str]  # entry ids, in index order (the model's classes)
    x: Sparse  # the training samples' term vectors
    y: np.ndarray  # their entries' positions
    w: np.ndarray  # their sample weights
    queries: list[tuple[Item, np.ndarray, np.ndarray]]  # held-out query, lexical raw per entry, its vector


def fold_data(kb: KnowledgeBase, train: Sequence[Item]) -> list[Fold]:
    """Per fold: the model's training samples and the held-out queries with their lexical scores."""
    from triage.core.matcher import index_for, rank

    out = []
    for fold, fkb in enumerate(fold_kbs(kb, train)):
        rest = [i for i in train if fold_of(i) != fold]
        held = [i for i in train if fold_of(i) == fold and i.kind == "queries"]
        ids = list(index_for(fkb).ids)
        samples = phrasings(fkb)
        for entry_id, texts in reports_of(fkb, rest).items():
            samples += [(entry_id, excerpt(t), REPORT_SAMPLE_WEIGHT) for t in texts]
        vocab: dict[str, int] = {}
        rows = [vector(fkb, t) for _, t, _ in samples]
        for row in rows:
            for t in row:
                vocab.setdefault(t, len(vocab))
        x = Sparse([{vocab[t]: v for t, v in row.items()} for row in rows], len(vocab))
        y = np.array([ids.index(e) for e, _, _ in samples])
        w = np.array([s for _, _, s in samples])
        queries = []
        for item in held:
            raw = {h.entry.id: h.raw for h in rank(fkb, item.text, top=len(ids)).hits}
            q = np.zeros(len(vocab))
            for t, v in vector(fkb, item.text).items():
                if t in vocab:
                    q[vocab[t]] = v
            queries.append((item, np.array([raw[i] for i in ids]), q))
        print(f"fold {fold}: {len(rows)} samples, {len(vocab)} terms, {len(queries)} queries", flush=True)
        out.append(Fold(ids, x, y, w, queries))
    return out


def judge(kb: KnowledgeBase, item: Item, ranked: list[str]) -> tuple[bool, bool]:
    """(ranked top-1, top-3) as bench_eval counts them (out of scope: an uncovered entry first)."""
    first = names_right(kb, item, ranked[0])
    if item.expect == ("none",):
        return first, first
    return first, any(names_right(kb, item, i) for i in ranked[:3])


def main() -> int:
    from triage.kb.loader import load_kb

    kb = load_kb()
    train = [i for kind in load_all().values() for i in kind if i.split == "train"]
    folds = fold_data(kb, train)
    n = sum(len(f.queries) for f in folds)
    print(f"train queries: {n}, {FOLDS}-fold CV")
    for l2 in L2_GRID:
        models = [fit_softmax(f.x, f.y, f.w, len(f.ids), l2) for f in folds]
        alone = 0
        peak = 0.0
        for lam in LAMBDAS:
            for form in ("prob", "logp"):
                if lam == 0 and form == "logp":
                    continue
                top1 = top3 = 0
                for f, weights in zip(folds, models, strict=True):
                    for item, raw, q in f.queries:
                        z = q @ weights
                        p = np.exp(z - z.max())
                        p /= p.sum()
                        score = raw + lam * (p if form == "prob" else np.log(p + 1e-9))
                        order = sorted(range(len(f.ids)), key=lambda k: (-score[k], f.ids[k]))
                        a, b = judge(kb, item, [f.ids[k] for k in order])
                        top1 += a
                        top3 += b
                        if lam == 0:
                            peak += float(p.max())
                            alone += judge(kb, item, [f.ids[k] for k in np.argsort(-p, kind="stable")])[0]
                print(
                    f"l2 {l2:g} lambda {lam:4.2f} {form}: ranked top-1 {top1 / n:6.1%}  top-3 {top3 / n:6.1%}"
                )
        print(f"l2 {l2:g} model alone: ranked top-1 {alone / n:6.1%}; mean top probability {peak / n:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
