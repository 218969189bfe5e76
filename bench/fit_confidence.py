"""Fit `ask`'s confidence model on the corpus's TRAIN split and write knowledge/confidence.yaml.

    python bench/fit_confidence.py            # fit, write knowledge/confidence.yaml, rebuild compiled.json
    python bench/fit_confidence.py --dry-run  # print the fit and the threshold table only

The model is a logistic regression of "the best-ranked entry is the right answer" on three
features of a ranking: the best entry's evidence from words, its lead over the runner-up, and the
strength of its matched error signature (0 when none matched). It is fitted on every train item `ask` can be given: the queries,
the pasted logs and the must-abstain inputs (for which only an out-of-scope leaf is right). The
threshold follows from what a wrong answer costs: triage prefers abstaining to a wrong answer, so
it answers only when the probability of being right is at least THRESHOLD (2/3: a wrong answer
costs twice a missing one).
Test items are never read here.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import Item, load_all  # noqa: E402

from triage.core.model import KnowledgeBase  # noqa: E402

# A wrong answer costs WRONG_COST times a missing one: answering pays off when the probability of
# being right is at least WRONG_COST / (1 + WRONG_COST).
WRONG_COST = 2.0
THRESHOLD = round(WRONG_COST / (1 + WRONG_COST), 3)
L2 = 0.01
Sample = tuple[tuple[float, float, float], int]


def sample(kb: KnowledgeBase, item: Item) -> Sample:
    from triage.core.matcher import rank

    match = rank(kb, item.text, top=2)
    first, second = match.hits[0], match.hits[1]
    right = not first.entry.covered if item.expect == ("none",) else first.entry.id in item.accepted
    return (first.words, first.raw - second.raw, first.signature), int(right)


def fit(samples: Sequence[Sample], steps: int = 50) -> list[float]:
    """Logistic regression by Newton's method: [bias, score, gap, signature]."""
    beta = [0.0, 0.0, 0.0, 0.0]
    for _ in range(steps):
        grad = [0.0] * 4
        hess = [[0.0] * 4 for _ in range(4)]
        for x, y in samples:
            row = (1.0, *x)
            z = sum(b * v for b, v in zip(beta, row, strict=True))
            p = 1 / (1 + math.exp(-max(-40.0, min(40.0, z))))
            for i in range(4):
                grad[i] += (y - p) * row[i]
                for j in range(4):
                    hess[i][j] += p * (1 - p) * row[i] * row[j]
        for i in range(1, 4):
            grad[i] -= L2 * beta[i]
            hess[i][i] += L2
        step = _solve(hess, grad)
        beta = [b + s for b, s in zip(beta, step, strict=True)]
        if max(abs(s) for s in step) < 1e-7:
            break
    return beta


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting (a 4x4 system)."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        if abs(m[col][col]) < 1e-12:
            continue
        for r in range(n):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [v - factor * w for v, w in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] if abs(m[i][i]) > 1e-12 else 0.0 for i in range(n)]


def probability(beta: Sequence[float], x: Sequence[float]) -> float:
    z = beta[0] + sum(b * v for b, v in zip(beta[1:], x, strict=True))
    return 1 / (1 + math.exp(-max(-40.0, min(40.0, z))))


def threshold_table(beta: Sequence[float], samples: Sequence[Sample]) -> list[str]:
    table = []
    for step in range(50, 96, 5):
        threshold = step / 100
        answered = [y for x, y in samples if probability(beta, x) >= threshold]
        precision = sum(answered) / len(answered) if answered else 1.0
        share = len(answered) / len(samples)
        table.append(
            f"  threshold {threshold:.2f}: answers {share:6.1%}, right when answering {precision:6.1%}"
        )
    return table


def corpus_stamp(items: Sequence[Item]) -> str:
    digest = hashlib.sha256()
    for item in items:
        digest.update(item.text.encode() + b"\0" + ",".join(item.accepted).encode() + b"\0")
    return digest.hexdigest()[:12]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dry-run", action="store_true", help="print the fit; write nothing")
    args = parser.parse_args(argv)
    from triage.kb.loader import load_kb

    kb = load_kb()
    items = [i for kind in load_all().values() for i in kind if i.split == "train"]
    samples = [sample(kb, i) for i in items]
    beta = fit(samples)
    threshold, table = THRESHOLD, threshold_table(beta, samples)
    right = sum(y for _, y in samples)
    print(f"train items: {len(samples)} (best entry right for {right}, {right / len(samples):.1%})")
    print(
        "model: "
        + ", ".join(f"{n} {v:+.3f}" for n, v in zip(("bias", "score", "gap", "signature"), beta, strict=True))
    )
    print("\n".join(table))
    print(f"threshold: {threshold} (a wrong answer costs {WRONG_COST:g} times a missing one)")
    if args.dry_run:
        return 0
    model = dict(zip(("bias", "score", "gap", "signature"), (round(b, 4) for b in beta), strict=True))
    lines = [
        "# ask's confidence model: generated by bench/fit_confidence.py from the TRAIN split of eval/;",
        "# do not edit by hand. P(best entry right) = logistic(bias + score*words + gap*lead + signature*strength);",
        "# ask answers when that probability is at least the threshold.",
        f"fitted_on: {{items: {len(samples)}, right: {right}, corpus: '{corpus_stamp(items)}'}}",
        "model:",
        *(f"  {k}: {v}" for k, v in model.items()),
        f"  threshold: {threshold}",
    ]
    target = REPO / "knowledge" / "confidence.yaml"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {target.relative_to(REPO)}; rebuilding compiled.json")
    from triage.main import main as triage_main

    return triage_main(["kb", "build"])


if __name__ == "__main__":
    sys.exit(main())
