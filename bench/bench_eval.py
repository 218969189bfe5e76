"""Accuracy of `triage ask` and `triage log` on the real-report corpus (eval/), train and test apart.

    python bench/bench_eval.py                              # figures for train, test and the dev set
    python bench/bench_eval.py --json                       # the same figures, machine-readable
    python bench/bench_eval.py --split train --show-misses  # every train item triage gets wrong

Queries go through the `ask` matcher, logs through the `log` engine (its Python API, as
`triage log` runs it). Figures, per split:
- top-1: the answer is right. For an item labelled with entries, the first-ranked entry is one of
  `expect` or `alternates` and triage did not abstain; for an item labelled `[none]`, triage
  abstained or named an out-of-scope (X) leaf.
- ranked top-1: the first-ranked entry is right, whether triage answered or abstained (the
  ranking alone; top-1 is ranking and calibration together).
- top-3: one of the first three ranked entries is right (an abstention still lists them).
- coverage: how often triage answers (does not say "no entry matches this well");
  precision: how often an answer is right.
- logs, first rank: of the items that name the rank that failed first, how many the log engine
  names too; "top-1 + rank" needs both.
- abstain: the must-abstain set (eval/abstain/): triage says nothing matches, or names an
  out-of-scope leaf. Its `log:` items are pasted into `ask` like its queries; the log engine's
  abstention on them is a line of its own.
- queries in another script: those a fifth or more of whose words are not in Latin script.
- seed-labelled: the queries and logs whose first label is a seed entry (D, MN, P), the ids the
  outside judge's key uses; our own entries (E, X) winning there is a miss, as it is for the judge.
  "entry-mean" averages each entry's own ranked top-1: the dev set holds about one report
  per seed entry, so a judge's set built the same way weighs a rare entry (MN4, P7) as much as a
  common one (D23), and this figure reads closer to it than the mean over items.
Targets on test: queries top-1 >= 85 %, top-3 >= 95 %, precision >= 90 %; logs top-1 with the first
failing rank >= 90 %; abstain >= 95 %; the dev set (../shared/eval/) no worse than before.
The test split is only ever printed as figures: --show-misses refuses it.
The shipped index holds the train queries as labelled reports (knowledge/reports.yaml), so `ask`'s
train figures are cross-validated (bench/crossval.py): each item is ranked by an index built
without its own fold's reports and without the symptom phrasings written from them (a symptom
most of whose weight lies in one of the fold's reports). Test and the dev set are ranked by the
shipped index.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import Item, dev_dir, load_all, names_right, split_of, thread_of  # noqa: E402
from crossval import (  # noqa: E402
    fold_kbs,
    fold_of,
    reports_of,
    signature_evidence,
    with_reports,
    without_symptoms,
    written_from,
)

from triage.core.model import KnowledgeBase  # noqa: E402
from triage.core.text import foreign_share  # noqa: E402

FOREIGN_SHARE = 0.2  # of an item's words in another script: the "queries in another script" rows


@dataclass(frozen=True)
class Outcome:
    """What triage made of one item."""

    item: Item
    answered: bool  # triage named an entry (not "no entry matches this well")
    right: bool  # top-1 in the sense of the module docstring
    top3: bool
    ranked_top1: bool  # the first-ranked entry is right, answered or not
    ranked: tuple[tuple[str, float], ...]
    verdict: str
    first_rank: int | None = None  # logs: the rank the engine says failed first

    @property
    def rank_right(self) -> bool | None:
        if self.item.first_rank is None:
            return None
        return self.first_rank == self.item.first_rank


def _judge(
    kb: KnowledgeBase, item: Item, ids: Sequence[str], answered: bool, out_of_scope: bool
) -> tuple[bool, bool, bool]:
    """(top-1, top-3, ranked top-1) for one item."""
    first = bool(ids) and names_right(kb, item, ids[0])
    top3 = any(names_right(kb, item, i) for i in ids[:3])
    if item.expect == ("none",):  # abstaining is right too
        return not answered or first, not answered or out_of_scope or top3, first
    return answered and first, top3, first


def ask_outcome(kb: KnowledgeBase, item: Item) -> Outcome:
    from triage.core.matcher import rank

    match = rank(kb, item.text, top=3)
    ids = [h.entry.id for h in match.hits]
    answered = match.verdict != "no_match"
    right, top3, first = _judge(kb, item, ids, answered, match.verdict == "out_of_scope")
    ranked = tuple((h.entry.id, h.score) for h in match.hits)
    return Outcome(item, answered, right, top3, first, ranked, match.verdict)


class LogEngine:
    """`triage log` over a pasted text, through the same modules the command runs."""

    def __init__(self, kb: KnowledgeBase) -> None:
        from triage.core.logscan.patterns import compile_signatures

        self.kb = kb
        self.signatures = compile_signatures(kb)

    def outcome(self, item: Item) -> Outcome:
        from triage.core.logscan.scanner import Scanner
        from triage.core.logscan.verdict import decide

        scanner = Scanner(self.signatures)
        scanner.feed_block(scanner.source("paste"), item.text.encode("utf-8", "replace"), 1)
        verdict = decide(scanner.scan, self.kb)
        ids = [d.entry_id for d in verdict.diagnoses]
        answered = verdict.found and bool(ids)
        out_of_scope = answered and not self.kb.entries[ids[0]].covered
        right, top3, first = _judge(self.kb, item, ids, answered, out_of_scope)
        ranked = tuple((d.entry_id, d.score) for d in verdict.diagnoses[:3])
        state = ("out_of_scope" if out_of_scope else "match") if answered else "no_match"
        return Outcome(item, answered, right, top3, first, ranked, state, verdict.first_rank)


def _pct(part: int, whole: int) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def figures(outcomes: Sequence[Outcome]) -> dict[str, float | int | None]:
    n = len(outcomes)
    answered = [o for o in outcomes if o.answered]
    ranked = [o for o in outcomes if o.rank_right is not None]
    return {
        "n": n,
        "top1": _pct(sum(o.right for o in outcomes), n),
        "ranked_top1": _pct(sum(o.ranked_top1 for o in outcomes), n),
        "top3": _pct(sum(o.top3 for o in outcomes), n),
        "coverage": _pct(len(answered), n),
        "precision": _pct(sum(o.right for o in answered), len(answered)),
        "with_rank": len(ranked),
        "first_rank": _pct(sum(bool(o.rank_right) for o in ranked), len(ranked)),
        "top1_and_rank": _pct(sum(o.right and o.rank_right is not False for o in outcomes), n),
    }


def per_entry_mean(outcomes: Sequence[Outcome]) -> dict[str, float | int | None]:
    """Ranked top-1 and top-3 averaged over the items' first labels, each label weighing the same."""
    by_entry: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_entry.setdefault(o.item.expect[0], []).append(o)
    groups = list(by_entry.values())
    if not groups:
        return {"entries": 0, "ranked_top1": None, "top3": None}
    return {
        "entries": len(groups),
        "ranked_top1": 100.0 * sum(sum(o.ranked_top1 for o in g) / len(g) for g in groups) / len(groups),
        "top3": 100.0 * sum(sum(o.top3 for o in g) / len(g) for g in groups) / len(groups),
    }


def abstain_figures(outcomes: Sequence[Outcome]) -> dict[str, float | int | None]:
    return {"n": len(outcomes), "abstained": _pct(sum(o.right for o in outcomes), len(outcomes))}


def _missing_labels(kb: KnowledgeBase, outcomes: Sequence[Outcome]) -> int:
    """Items whose right answers are all ids the knowledge base does not have yet."""
    return sum(
        1
        for o in outcomes
        if o.item.expect != ("none",) and not any(i in kb.entries for i in o.item.accepted)
    )


def part_of(item: Item) -> str:
    """The corpus part an item comes from: its file's name (`eval/queries/i.yaml` is part i; an
    abstain file named `other_domains_i.yaml` (or `other_domains_ab.yaml`) belongs to part i (ab) too)."""
    stem = Path(item.origin.split("#", 1)[0].split(":", 1)[0]).stem
    head, _, tail = stem.rpartition("_")
    return tail if head and len(tail) <= 2 and tail.isalpha() else stem


def seed_labelled(item: Item) -> bool:
    """Whether the item's first label is a seed entry (D, MN or P): the only ids the outside
    judge's key uses (with `none`), so these items read the closest to how it measures; an answer
    with one of our own entries (E, X, CK) counts as wrong there."""
    return item.expect[0][:1] in ("D", "M", "P")


def evaluate(
    kb: KnowledgeBase,
    items: Mapping[str, list[Item]],
    splits: Sequence[str],
    parts: frozenset[str] | None = None,
) -> dict[str, object]:
    """Figures per split; with `parts`, only the items of those corpus parts are scored (the
    train folds' indexes still hold every other train report, as the shipped index does)."""
    engine = LogEngine(kb)
    out: dict[str, object] = {}
    for split in splits:
        # the shipped index holds the train reports: each train fold is ranked without its own
        train = [i for kind in items.values() for i in kind if i.split == "train"]
        kbs = fold_kbs(kb, train) if split == "train" else []

        def ask(item: Item, kbs: list[KnowledgeBase] = kbs) -> Outcome:
            return ask_outcome(kbs[fold_of(item)] if item.split == "train" else kb, item)

        def scored(item: Item, split: str = split) -> bool:
            return item.split == split and (parts is None or part_of(item) in parts)

        queries = [ask(i) for i in items["queries"] if scored(i)]
        logs = [engine.outcome(i) for i in items["logs"] if scored(i)]
        abstain_items = [i for i in items["abstain"] if scored(i)]
        abstain = [ask(i) for i in abstain_items]
        abstain_logs = [engine.outcome(i) for i in abstain_items if i.is_log]
        out[split] = {
            "queries": figures(queries) | {"labels_not_in_kb": _missing_labels(kb, queries)},
            "logs": figures(logs) | {"labels_not_in_kb": _missing_labels(kb, logs)},
            "seed_queries": figures([o for o in queries if seed_labelled(o.item)]),
            "seed_entries": per_entry_mean([o for o in queries if seed_labelled(o.item)]),
            "seed_logs": figures([o for o in logs if seed_labelled(o.item)]),
            "foreign_queries": figures([o for o in queries if foreign(o.item)]),
            "abstain": abstain_figures(abstain),
            "abstain_log_engine": abstain_figures(abstain_logs),
            "_outcomes": queries + logs + abstain + abstain_logs,
        }
    return out


def dev_figures(kb: KnowledgeBase, train: Sequence[Item] = ()) -> dict[str, object] | None:
    """The dev set's figures, ranked by an index that holds no train report from a thread the dev
    set also takes an item from (nor the symptoms written from one): the corpus found some of the
    same threads, and the dev figure must stay out of sample."""
    import yaml

    folder = dev_dir()
    if folder is None:
        return None
    sets = []
    for name, kind in (("dev_queries.yaml", "queries"), ("dev_logs.yaml", "logs")):
        path = folder / name
        if path.is_file():
            raw_items = yaml.safe_load(path.read_text(encoding="utf-8")) or []
            sets.append((kind, [_dev_item(raw, kind, f"{name}#{n}") for n, raw in enumerate(raw_items, 1)]))
    threads = {thread_of(i.source) for _, items in sets for i in items}
    shared = [i for i in train if thread_of(i.source) in threads]
    if shared:
        rest = [i for i in train if thread_of(i.source) not in threads]
        kb = with_reports(
            without_symptoms(kb, written_from(kb, shared)),
            reports_of(kb, rest),
            None,
            signature_evidence(kb, rest),
        )
    engine = LogEngine(kb)
    result: dict[str, object] = {"path": str(folder), "train_items_left_out": len(shared)}
    for kind, items in sets:
        judge = engine.outcome if kind == "logs" else (lambda i: ask_outcome(kb, i))
        result[kind] = figures([judge(i) for i in items])
    return result


def _dev_item(raw: dict[str, object], kind: str, origin: str) -> Item:
    is_log = "log" in raw
    text = str(raw["log"] if is_log else raw["query"])
    expect = raw.get("expect") or []
    assert isinstance(expect, list)
    ids = tuple("none" if str(e).lower() == "none" else str(e).upper() for e in expect)
    source = str(raw.get("source", ""))
    return Item(
        "queries" if kind == "queries" else "logs",
        text,
        ids,
        (),
        source,
        None,
        is_log,
        origin,
        split_of(source, text),
    )


def foreign(item: Item) -> bool:
    """Whether a fifth or more of the item's words are in a script other than Latin (reports
    written in Chinese, Japanese, Korean, Russian ...; their English words kept as written)."""
    return foreign_share(item.text) >= FOREIGN_SHARE


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}%" if isinstance(value, float) else str(value)


ROWS: tuple[tuple[str, str, str], ...] = (
    ("queries", "n", "queries: items"),
    ("queries", "top1", "queries: top-1"),
    ("queries", "ranked_top1", "queries: ranked top-1 (abstention ignored)"),
    ("queries", "top3", "queries: top-3"),
    ("queries", "coverage", "queries: coverage (answered)"),
    ("queries", "precision", "queries: precision (right when answered)"),
    ("queries", "labels_not_in_kb", "queries: labelled with ids not in the kb"),
    ("logs", "n", "logs: items"),
    ("logs", "top1", "logs: top-1"),
    ("logs", "top3", "logs: top-3"),
    ("logs", "coverage", "logs: coverage (answered)"),
    ("logs", "precision", "logs: precision (right when answered)"),
    ("logs", "with_rank", "logs: items naming the first rank"),
    ("logs", "first_rank", "logs: first failing rank right"),
    ("logs", "top1_and_rank", "logs: top-1 with the first rank right"),
    ("logs", "labels_not_in_kb", "logs: labelled with ids not in the kb"),
    ("seed_queries", "n", "seed-labelled queries: items"),
    ("seed_queries", "ranked_top1", "seed-labelled queries: ranked top-1"),
    ("seed_queries", "top1", "seed-labelled queries: top-1"),
    ("seed_queries", "precision", "seed-labelled queries: precision"),
    ("seed_entries", "entries", "seed-labelled queries: entries"),
    ("seed_entries", "ranked_top1", "seed-labelled queries: entry-mean ranked top-1"),
    ("seed_entries", "top3", "seed-labelled queries: entry-mean top-3"),
    ("seed_logs", "n", "seed-labelled logs: items"),
    ("seed_logs", "top1", "seed-labelled logs: top-1"),
    ("seed_logs", "precision", "seed-labelled logs: precision"),
    ("foreign_queries", "n", "queries in another script: items"),
    ("foreign_queries", "ranked_top1", "queries in another script: ranked top-1"),
    ("foreign_queries", "top1", "queries in another script: top-1"),
    ("abstain", "n", "must-abstain: items"),
    ("abstain", "abstained", "must-abstain: abstained (ask)"),
    ("abstain_log_engine", "n", "must-abstain: log items"),
    ("abstain_log_engine", "abstained", "must-abstain: log items, log engine abstained"),
)


def print_table(result: dict[str, object], splits: Sequence[str], dev: dict[str, object] | None) -> None:
    columns = [*splits, *(["dev"] if dev else [])]
    print(f"{'':48}" + "".join(f"{c:>10}" for c in columns))
    for group, key, label in ROWS:
        cells = []
        for column in columns:
            block = dev if column == "dev" else result[column]
            assert isinstance(block, dict)
            values = block.get(group)
            cells.append(_fmt(values.get(key)) if isinstance(values, dict) else "-")
        print(f"{label:48}" + "".join(f"{c:>10}" for c in cells))
    if dev:
        left_out = dev.get("train_items_left_out")
        print(f"(dev = {dev['path']}; ranked without the {left_out} train items from threads it shares)")
    if "train" in splits:
        print(
            "(train: ask's figures cross-validated, each fold ranked by an index without its reports"
            " or the symptoms written from them)"
        )


def show_misses(outcomes: Sequence[Outcome]) -> None:
    misses = [o for o in outcomes if not o.right or o.rank_right is False]
    for o in misses:
        label = "abstain" if o.item.kind == "abstain" else "/".join(o.item.expect)
        if o.item.alternates:
            label += f" (alt {'/'.join(o.item.alternates)})"
        got = " ".join(f"{i}:{s:.2f}" for i, s in o.ranked)
        rank = f" rank {o.first_rank} vs {o.item.first_rank}" if o.rank_right is False else ""
        engine = (
            "log"
            if o.item.kind == "logs" or (o.item.kind == "abstain" and o.first_rank is not None)
            else "ask"
        )
        text = " ".join(o.item.text.split())[:150]
        print(f"MISS {o.item.origin} [{engine}] expect {label} got [{o.verdict}] {got}{rank}\n     {text}")
    print(f"{len(misses)} misses")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=["train", "test", "both"], default="both")
    parser.add_argument(
        "--show-misses", action="store_true", help="list the items triage gets wrong (train only)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--no-dev", action="store_true", help="leave out the dev set (../shared/eval)")
    parser.add_argument(
        "--parts",
        metavar="P,Q",
        help="score only these corpus parts (file names: `i,j` is eval/*/i.yaml and j.yaml): new "
        "reports measured before anyone tunes on them read like the unseen ones",
    )
    args = parser.parse_args(argv)
    parts = frozenset(p.strip() for p in args.parts.split(",") if p.strip()) if args.parts else None
    if args.show_misses and args.split != "train":
        print("bench_eval: --show-misses lists train items only (use --split train)", file=sys.stderr)
        return 2
    from triage.kb.loader import load_kb

    kb = load_kb()
    splits = ["train", "test"] if args.split == "both" else [args.split]
    items = load_all()
    result = evaluate(kb, items, splits, parts)
    train = [i for kind in items.values() for i in kind if i.split == "train"]
    dev = None if args.no_dev else dev_figures(kb, train)
    if args.show_misses:
        block = result["train"]
        assert isinstance(block, dict)
        show_misses(block["_outcomes"])
    for split in splits:
        block = result[split]
        assert isinstance(block, dict)
        block.pop("_outcomes")
    if args.json:
        print(json.dumps(result | ({"dev": dev} if dev else {}), indent=2))
    else:
        print_table(result, splits, dev)
    return 0


if __name__ == "__main__":
    sys.exit(main())
