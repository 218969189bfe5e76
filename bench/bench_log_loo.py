"""How much the log engine's TRAIN figures owe to signatures written from the items they score.

    python bench/bench_log_loo.py              # leave-one-part-out figures for the train logs
    python bench/bench_log_loo.py --show-misses  # the train items that only their own part's signatures get right
    python bench/bench_log_loo.py --fold-reports # the fallback's index also without the item's own fold

A signature is *written from* a part when every one of its `examples:` lines is a line of that
part's train logs (whitespace and case aside): no other part and no reproduction's output needed
it. Each part's train logs are then scored by a knowledge base without the signatures written from
that part, as the engine meets an unseen log. The gap between the plain and the left-out figures is
how much the train score rests on signatures tied to the items they came from; a mechanism that
generalises narrows it. Train items only: the test split is never read here.

When no signature fires, the log engine asks the query engine, whose shipped index holds the train
queries as reports, the item's own thread's among them. With --fold-reports each item is scored
by the index of its cross-validation fold (bench/crossval.py, as bench_eval scores `ask`), so a
fallback answer cannot come from the item's own thread either.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_eval import LogEngine, Outcome, figures, part_of  # noqa: E402
from corpus import load, load_all  # noqa: E402
from crossval import fold_kbs, fold_of  # noqa: E402

from triage.core.model import KnowledgeBase  # noqa: E402

MIN_EXAMPLE = 25  # shorter examples (a bare error name) say nothing about where they came from


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def written_from(kb: KnowledgeBase, texts: Sequence[str]) -> set[tuple[str, int]]:
    """(entry id, signature index) of the signatures whose every example is in one of `texts`."""
    flat = [_flat(t) for t in texts]
    found: set[tuple[str, int]] = set()
    for entry in kb.entries.values():
        for index, sig in enumerate(entry.signatures):
            examples = [_flat(e) for e in sig.examples]
            if not examples or any(len(e) < MIN_EXAMPLE for e in examples):
                continue
            if all(any(e in t for t in flat) for e in examples):
                found.add((entry.id, index))
    return found


def without(kb: KnowledgeBase, dropped: set[tuple[str, int]]) -> KnowledgeBase:
    entries = {
        entry_id: entry._replace(
            signatures=tuple(s for i, s in enumerate(entry.signatures) if (entry_id, i) not in dropped)
        )
        for entry_id, entry in kb.entries.items()
    }
    return kb._replace(entries=entries)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--show-misses", action="store_true", help="list the items only their own part gets right"
    )
    parser.add_argument(
        "--fold-reports",
        action="store_true",
        help="score each item by its cross-validation fold's index (no reports of its own thread)",
    )
    args = parser.parse_args(argv)
    from triage.kb.loader import load_kb

    kb = load_kb()
    folds: list[KnowledgeBase] = []
    if args.fold_reports:
        folds = fold_kbs(kb, [i for kind in load_all().values() for i in kind if i.split == "train"])
    logs = [i for i in load("logs") if i.split == "train"]
    parts = sorted({part_of(i) for i in logs})
    plain_engine = LogEngine(kb)
    plain: list[Outcome] = []
    left_out: list[Outcome] = []
    print(f"{'part':6}{'items':>7}{'dropped sigs':>14}{'top1+rank':>11}{'left out':>10}")
    for part in parts:
        items = [i for i in logs if part_of(i) == part]
        dropped = written_from(kb, [i.text for i in items])
        engines = [LogEngine(without(fold, dropped)) for fold in folds] or [LogEngine(without(kb, dropped))]
        mine = [plain_engine.outcome(i) for i in items]
        theirs = [engines[fold_of(i) if folds else 0].outcome(i) for i in items]
        plain += mine
        left_out += theirs
        print(
            f"{part:6}{len(items):>7}{len(dropped):>14}"
            f"{figures(mine)['top1_and_rank']!s:>10}%{figures(theirs)['top1_and_rank']!s:>9}%"
        )
        if args.show_misses:
            for a, b in zip(mine, theirs, strict=True):
                if a.right and not b.right:
                    got = " ".join(f"{i}:{s:.2f}" for i, s in b.ranked)
                    print(f"   LOST {a.item.origin} expect {'/'.join(a.item.expect)} got {got or '-'}")
    for name, outcomes in (("plain", plain), ("left-out", left_out)):
        f = figures(outcomes)
        print(
            f"{name:9} top-1 {f['top1']}%  top-1+rank {f['top1_and_rank']}%  coverage {f['coverage']}%"
            f"  precision {f['precision']}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
