"""Accuracy of `triage ask` on labelled real phrasings, and on the knowledge itself.

    python bench/bench_ask_eval.py [--queries PATH] [--loo] [--verbose]

Dev set: an item counts for top-1 when the first-ranked id is in `expect` and ask did not say
"nothing matches"; `[none]` items count when ask says nothing matches well or names an
out-of-scope leaf. Top-3 counts an expected id among the first three.
--loo adds leave-one-symptom-out: each symptom phrasing is removed from its entry, the index is
rebuilt, and the phrasing is asked; this measures generalisation to phrasings the knowledge has
never seen, which the held-out set rewards and the dev set alone cannot show. It rebuilds the
index once per phrasing (about a second each): expect tens of minutes. bench/bench_eval.py is the
main measure now (the real-report corpus, train and test apart).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage.core import matcher  # noqa: E402
from triage.core.model import KnowledgeBase  # noqa: E402
from triage.kb.loader import load_kb  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from corpus import dev_dir  # noqa: E402  (../shared/eval beside a checkout or a worktree)

DEFAULT_QUERIES = (dev_dir() or REPO.parent / "shared" / "eval") / "dev_queries.yaml"


def judge(kb: KnowledgeBase, text: str, expect: list[str]) -> tuple[bool, bool, matcher.Match]:
    match = matcher.rank(kb, text, top=3)
    ids = [h.entry.id for h in match.hits]
    if expect == ["none"]:
        ok = match.verdict in ("no_match", "out_of_scope")
        return ok, ok, match
    top1 = match.verdict != "no_match" and ids[0] in expect
    top3 = any(i in expect for i in ids[:3])
    return top1, top3, match


def dev_set(kb: KnowledgeBase, path: Path, verbose: bool) -> tuple[float, float]:
    items = yaml.safe_load(path.read_text())
    hit1 = hit3 = 0
    for item in items:
        top1, top3, match = judge(kb, item["query"], [str(e) for e in item["expect"]])
        hit1 += top1
        hit3 += top3
        if verbose and not top1:
            got = ", ".join(f"{h.entry.id}:{h.score:.2f}" for h in match.hits)
            print(f"  MISS expect={item['expect']} got [{match.verdict}] {got} :: {item['query'][:90]}")
    n = len(items)
    print(
        f"dev set ({path.name}, {n} items): top-1 {hit1 / n:.1%} ({hit1}/{n}), top-3 {hit3 / n:.1%} ({hit3}/{n})"
    )
    return hit1 / n, hit3 / n


def leave_one_out(kb: KnowledgeBase, verbose: bool) -> float:
    total = hit = 0
    for entry in kb.entries.values():
        for i, phrase in enumerate(entry.symptoms):
            reduced = entry._replace(symptoms=entry.symptoms[:i] + entry.symptoms[i + 1 :])
            kb2 = kb._replace(entries={**kb.entries, entry.id: reduced}, match_index=None)
            match = matcher.rank(kb2, phrase, top=3)
            ok = match.hits[0].entry.id == entry.id
            total += 1
            hit += ok
            if verbose and not ok:
                print(
                    f"  LOO MISS {entry.id} -> {match.hits[0].entry.id}:{match.hits[0].score:.2f} :: {phrase[:80]}"
                )
    print(f"leave-one-symptom-out ({total} phrasings): top-1 {hit / total:.1%}")
    return hit / total


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES)
    parser.add_argument("--loo", action="store_true", help="also run leave-one-symptom-out on the knowledge")
    parser.add_argument("--verbose", action="store_true", help="print every miss")
    args = parser.parse_args()
    kb = load_kb()
    if args.queries.is_file():
        top1, top3 = dev_set(kb, args.queries, args.verbose)
        print(
            f"targets: top-1 >= 85% [{'met' if top1 >= 0.85 else 'NOT met'}], "
            f"top-3 >= 95% [{'met' if top3 >= 0.95 else 'NOT met'}]"
        )
    else:
        print(f"dev set not found at {args.queries}; skipping it")
    if args.loo:
        leave_one_out(kb, args.verbose)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
