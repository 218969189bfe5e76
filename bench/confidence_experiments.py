"""The confidence experiments of bench/query_experiments.py (`confidence`, `reliability`,
`second_view`): features tried beside fit_confidence's own, on train CV. Their figures and what
they mean are in that script's docstring. `signature_evidence` compares the folds' indexes with and
without the signature evidence (knowledge/signature_evidence.yaml; each fold counts the other
folds only): on parts a-n (919 train queries) answered-right went from 37.1 % to 45.4 % at about the
same precision (91.8 -> 90.9 %), AUC 0.805 to 0.813, ranked top-1 73.7 to 73.6 %; on parts a-l,
RELIABILITY_POWER 1 gave 40.9 %, 2 gave 44.4 %, 3 45.2 %, and the prior's weight (2-5 matches)
moved it by under a point.

    python bench/confidence_experiments.py                     # all of them (5 CPU minutes)
    python bench/confidence_experiments.py signature_evidence  # one of them
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit_confidence as fc
from corpus import Item
from crossval import FOLDS, fold_kbs, fold_of
from query_experiments import (
    KINDS,
    Experiment,
    Row,
    _english_weight,
    collect,
    confidence_line,
    patched,
    report,
)

from triage.core import match_index, matcher
from triage.core.model import KnowledgeBase


def _extra(n: int) -> Callable[[Row], tuple[float, ...]]:
    def pick(row: Row) -> tuple[float, ...]:
        return (row.extra[n],)

    return pick


def _confidence_extra(kb: KnowledgeBase, item: Item, match: matcher.Match) -> tuple[float, ...]:
    index = matcher.index_for(kb)
    terms, _ = matcher.query_terms(index, item.text)
    coverage, phrase, _ = matcher._scores(index, terms)
    top = index.ids.index(match.hits[0].entry.id)
    kinds = [t for t in KINDS if t in terms]
    carried = [dict(p.entries).get(top, 0.0) for t in kinds if (p := index.posting(t))]
    head = item.text.strip().split("\n", 1)[0]
    title_agrees = (
        head == item.text.strip() or matcher.rank(kb, head, top=1).hits[0].entry.id == match.hits[0].entry.id
    )
    total = sum(coverage) or 1.0
    entropy = -sum(c / total * math.log(c / total) for c in coverage if c > 0)
    gap = match.hits[0].raw - match.hits[1].raw if len(match.hits) > 1 else 0.0
    return (
        float(max(range(len(coverage)), key=coverage.__getitem__) == top),
        float(max(range(len(phrase)), key=phrase.__getitem__) == top),
        sum(carried) / len(carried) if carried else 0.0,
        float(bool(kinds)),
        float(title_agrees),
        entropy,
        gap,
        phrase[top],
        coverage[top],
    )


CONFIDENCE_FEATURES = (
    "best by coverage",
    "best by phrasing",
    "kind carried",
    "has a kind",
    "first line agrees",
    "coverage entropy",
    "raw gap",
    "phrasing",
    "coverage",
)


def confidence(kb: KnowledgeBase, items: Sequence[Item]) -> None:
    rows = collect(fold_kbs(kb, items), items, _confidence_extra)
    features: list[tuple[str, Callable[[Row], tuple[float, ...]]]] = [
        (name, _extra(n)) for n, name in enumerate(CONFIDENCE_FEATURES)
    ]
    features += [
        ("kind carried + has a kind", lambda r: r.extra[2:4]),
        ("lead x score", lambda r: (r.base[0] * r.base[1],)),
        ("lead^2", lambda r: (r.base[1] ** 2,)),
        ("score^2", lambda r: (r.base[0] ** 2,)),
        ("signature x lead", lambda r: (r.base[2] * r.base[1],)),
        ("lead / score", lambda r: (r.base[1] / max(r.base[0], 1e-3),)),
        ("all of the extra ones", lambda r: r.extra),
    ]
    report("confidence", rows, features)
    probabilities = fc.cross_validated([r.item for r in rows], [(r.base, int(r.right)) for r in rows])
    scored = sorted(
        ((p, r.right) for p, r in zip(probabilities, rows, strict=True) if r.whole_query), reverse=True
    )
    best = right = 0
    for n, (_, y) in enumerate(scored, 1):
        right += y
        best = right if right >= 0.9 * n else best
    print(
        f"   oracle threshold on the shipped features: {best / len(scored):.1%} of the queries answered right at 90 % precision"
    )


def reliability(kb: KnowledgeBase, items: Sequence[Item]) -> None:
    rows = collect(fold_kbs(kb, items), items)
    folds = [fold_of(r.item) for r in rows]

    def table(leave_out: set[int], pseudo: float) -> Callable[[str], float]:
        counts: dict[str, list[int]] = {}
        for row, fold in zip(rows, folds, strict=True):
            if fold not in leave_out:
                seen = counts.setdefault(row.top, [0, 0])
                seen[0] += row.right
                seen[1] += 1
        mean = sum(r for r, _ in counts.values()) / max(sum(n for _, n in counts.values()), 1)

        def logit(entry: str) -> float:
            right, n = counts.get(entry, [0, 0])
            p = (right + pseudo * mean) / (n + pseudo)
            return math.log(p / (1 - p))

        return logit

    report("reliability (shipped features first)", rows)
    for pseudo in (2.0, 5.0, 10.0, 20.0):
        probabilities = [0.0] * len(rows)
        for fold in range(FOLDS):
            inner = {other: table({fold, other}, pseudo) for other in range(FOLDS) if other != fold}
            samples = [
                ((*r.base, inner[f](r.top)), int(r.right))
                for r, f in zip(rows, folds, strict=True)
                if f != fold
            ]
            beta = fc.fit(samples)
            outer = table({fold}, pseudo)
            for n, f in enumerate(folds):
                if f == fold:
                    probabilities[n] = fc.probability(beta, (*rows[n].base, outer(rows[n].top)))
        print(confidence_line(f"+ reliability ({pseudo:g} pseudo-counts)", rows, probabilities))


def second_view(kb: KnowledgeBase, items: Sequence[Item]) -> None:
    kbs = fold_kbs(kb, items)
    views = {}
    for name, (ceiling, rare, power) in {"steeper": (8.0, 0.0, 1.5), "ceiling 7": (7.0, 2.0, 1.0)}.items():
        with patched(match_index, "term_weight", _english_weight(ceiling, rare, power)):
            views[name] = fold_kbs(kb, items)

    def extra(fold_kb: KnowledgeBase, item: Item, match: matcher.Match) -> tuple[float, ...]:
        top = match.hits[0].entry.id
        out: list[float] = []
        for view in views.values():
            other = matcher.rank(view[fold_of(item)], item.text, top=len(kb.entries))
            hit = next(h for h in other.hits if h.entry.id == top)
            out += [hit.words, hit.lead, float(other.hits[0].entry.id == top)]
        return tuple(out)

    rows = collect(kbs, items, extra)
    features: list[tuple[str, Callable[[Row], tuple[float, ...]]]] = []
    for n, name in enumerate(views):
        features += [
            (f"{name}: words + lead", _extra_slice(3 * n, 3 * n + 2)),
            (f"{name}: lead", _extra_slice(3 * n + 1, 3 * n + 2)),
            (f"{name}: its best too", _extra_slice(3 * n + 2, 3 * n + 3)),
        ]
    report("second_view", rows, features)


def _extra_slice(start: int, stop: int) -> Callable[[Row], tuple[float, ...]]:
    def pick(row: Row) -> tuple[float, ...]:
        return row.extra[start:stop]

    return pick


def signature_evidence(kb: KnowledgeBase, items: Sequence[Item]) -> None:
    from crossval import reports_of, with_reports, without_symptoms, written_from

    plain = []
    for fold in range(FOLDS):
        held_out = [i for i in items if fold_of(i) == fold]
        rest = [i for i in items if fold_of(i) != fold]
        plain.append(with_reports(without_symptoms(kb, written_from(kb, held_out)), reports_of(kb, rest)))
    report("without signature evidence", collect(plain, items))
    report("with signature evidence (shipped)", collect(fold_kbs(kb, items), items))


EXPERIMENTS: dict[str, Experiment] = {
    "confidence": confidence,
    "reliability": reliability,
    "second_view": second_view,
    "signature_evidence": signature_evidence,
}

if __name__ == "__main__":
    import query_experiments

    sys.exit(
        query_experiments.main(more=EXPERIMENTS)
        if sys.argv[1:]
        else query_experiments.main(list(EXPERIMENTS), EXPERIMENTS)
    )
