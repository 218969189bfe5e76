"""Top-1 accuracy of `triage log` on labelled real error output (default: ../shared/eval/dev_logs.yaml).

Each item is a pasted log and the entries that answer it, best first. An item counts as correct
when the first diagnosis is the first expected entry; `[none]` items count as correct when the
log reports no known failure or its best entry is an out-of-scope leaf.

    python bench/bench_log_eval.py [PATH] [--verbose]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT = REPO.parent / "shared" / "eval" / "dev_logs.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if not args.path.is_file():
        print(f"bench_log_eval: skipped, {args.path} not found")
        return 0

    import yaml

    from triage.core.logscan.patterns import compile_signatures
    from triage.core.logscan.scanner import Scanner
    from triage.core.logscan.verdict import decide
    from triage.kb.loader import load_kb

    kb = load_kb()
    signatures = compile_signatures(kb)
    items = yaml.safe_load(args.path.read_text())
    correct = 0
    for number, item in enumerate(items, 1):
        expect = [str(e).upper() for e in item["expect"]]
        scanner = Scanner(signatures)
        scanner.feed_block(scanner.source(f"item{number}"), item["log"].encode(), 1)
        verdict = decide(scanner.scan, kb)
        best = verdict.diagnoses[0].entry_id if verdict.found else None
        ok = best is None or not kb.entries[best].covered if expect[0] == "NONE" else best == expect[0]
        correct += ok
        if args.verbose or not ok:
            got = [f"{d.entry_id}:{d.score:.2f}" for d in verdict.diagnoses[:3]]
            print(f"{'ok ' if ok else 'MISS'} #{number} expect {expect} got {got or 'no known failure'}")
    print(f"top-1: {correct}/{len(items)} = {correct / len(items):.0%}  ({args.path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
