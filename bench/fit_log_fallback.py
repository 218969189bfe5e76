"""Where the log engine's query-engine fallback should answer: its scores on the TRAIN logs.

    python bench/fit_log_fallback.py            # one row per train log no signature names
    python bench/fit_log_fallback.py --loo      # each part scored without the signatures written from it

For every train log (and must-abstain log) whose scan finds no diagnosis, the fallback's text goes
to the query engine; each row is its best entry's score, the runner-up's share of it, whether the
text is in the domain, and whether that entry is right. The score below which answers turn
wrong is the log threshold (triage.core.logscan.query_reading.LOG_THRESHOLD): the query engine's
own threshold is fitted on descriptions, where content-free text must get no answer, and a log's
errors are not content-free. Test items are never read here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_eval import part_of  # noqa: E402
from bench_log_loo import without, written_from  # noqa: E402
from corpus import load, names_right  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--loo", action="store_true", help="score each part without the signatures written from it"
    )
    args = parser.parse_args(argv)
    from triage.core import matcher
    from triage.core.logscan.ordering import order_events
    from triage.core.logscan.patterns import compile_signatures
    from triage.core.logscan.query_reading import LOG_THRESHOLD, fallback_text, in_domain
    from triage.core.logscan.scanner import Scanner
    from triage.core.logscan.verdict import decide
    from triage.kb.loader import load_kb

    kb = load_kb()
    items = [i for i in load("logs") if i.split == "train"]
    items += [i for i in load("abstain") if i.split == "train" and i.is_log]
    rows = []
    for part in sorted({part_of(i) for i in items}):
        mine = [i for i in items if part_of(i) == part]
        part_kb = without(kb, written_from(kb, [i.text for i in mine])) if args.loo else kb
        signatures = compile_signatures(part_kb)
        for item in mine:
            scanner = Scanner(signatures)
            scanner.feed_block(scanner.source("paste"), item.text.encode("utf-8", "replace"), 1)
            if decide(scanner.scan, part_kb, fallback=False).found:
                continue
            text = fallback_text(scanner.scan, order_events(scanner.scan)[0])
            hits = matcher.rank(part_kb, text, top=2).hits if text.strip() else ()
            if not hits or not in_domain(text, scanner.scan):
                continue  # out of the domain, the fallback never answers
            best = hits[0]
            share = hits[1].score / best.score if len(hits) > 1 and best.score else 0.0
            right = names_right(kb, item, best.entry.id)
            rows.append((best.score, share, right, item.origin, best.entry.id))
    rows.sort(reverse=True)
    for score, share, right, origin, entry_id in rows:
        print(f"{score:.3f}  runner-up {share:.2f}  {'right' if right else 'WRONG':5}  {entry_id:4} {origin}")
    above = [r for r in rows if r[0] >= LOG_THRESHOLD]
    below = [r for r in rows if r[0] < LOG_THRESHOLD]
    print(
        f"LOG_THRESHOLD {LOG_THRESHOLD}: {sum(r[2] for r in above)}/{len(above)} right at or above,"
        f" {sum(r[2] for r in below)}/{len(below)} right below"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
