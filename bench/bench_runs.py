"""`triage log` on real torch failure output from scripts written independently of it (eval/runs/).

    python bench/bench_runs.py                      # figures for train and test
    python bench/bench_runs.py --show-misses        # the train items the log engine gets wrong
    python bench/bench_runs.py --rerun              # run every script again, store its output, score
    python bench/bench_runs.py --rerun a.py,b       # only these scripts (the others' outputs kept)
    python bench/bench_runs.py --only @new.txt      # score only these scripts (names, or @file of names)

The scripts in eval/runs/scripts/ are the mistakes users make in distributed training code, each
with the entry it shows (`label:`) and how it is launched (`launch:`; torchrun, mp.spawn or plain
python on CPU/gloo). Their stored output is scored exactly as bench/bench_eval.py scores the pasted
logs of the corpus (its LogEngine and figures): top-1, the first failing rank, coverage, precision.
The split is a hash of the script's name (bench/runs_capture.py); test is printed as figures only.
--rerun runs the scripts one after another (each bounded by `timeout -s KILL 120`), with progress.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_eval import LogEngine, Outcome, figures, show_misses  # noqa: E402
from corpus import Item, Split, item_of  # noqa: E402
from runs_capture import RUNS, load_raw, rerun  # noqa: E402

ROWS = (
    ("n", "items"),
    ("top1", "top-1"),
    ("top3", "top-3"),
    ("coverage", "coverage (answered)"),
    ("precision", "precision (right when answered)"),
    ("with_rank", "items naming the first rank"),
    ("first_rank", "first failing rank right"),
    ("top1_and_rank", "top-1 with the first rank right"),
)


def _script_of(raw: dict[str, object]) -> str:
    """The file name of the script whose output `raw` is ("eval/runs/scripts/a.py (default)")."""
    return Path(str(raw.get("source", "")).split(" ", 1)[0]).name


def items(split: Split, only: set[str] | None = None) -> list[Item]:
    """The stored outputs of one split (of the scripts named in `only`), as corpus log items."""
    return [
        item_of(raw, "logs", f"{(RUNS / split).relative_to(REPO)}.yaml#{n} {raw.get('source', '')}", split)
        for n, raw in enumerate(load_raw(split), 1)
        if only is None or _script_of(raw) in only or Path(_script_of(raw)).stem in only
    ]


def _names(spec: str) -> set[str] | None:
    """Script names from "a.py,b" or "@file" (one name a line); None for all."""
    if spec.startswith("@"):
        spec = Path(spec[1:]).read_text(encoding="utf-8").replace("\n", ",")
    return {n.strip() for n in spec.split(",") if n.strip()} or None


def score(
    engine: LogEngine, split: Split, only: set[str] | None = None
) -> tuple[dict[str, float | int | None], list[Outcome]]:
    outcomes = [engine.outcome(i) for i in items(split, only)]
    return figures(outcomes), outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rerun", nargs="?", const="", metavar="A,B", help="run the scripts again (all, or these)"
    )
    parser.add_argument("--show-misses", action="store_true", help="list the train misses")
    parser.add_argument("--only", default="", metavar="A,B|@FILE", help="score only these scripts' outputs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.rerun is not None:
        rerun(_names(args.rerun), lambda line: print(line, file=sys.stderr, flush=True))
    from triage.kb.loader import load_kb

    engine = LogEngine(load_kb())
    result: dict[str, dict[str, float | int | None]] = {}
    splits: tuple[Split, ...] = ("train", "test")
    for split in splits:
        result[split], outcomes = score(engine, split, _names(args.only))
        if args.show_misses and split == "train":
            show_misses(outcomes)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'eval/runs (real torch output)':40}{'train':>10}{'test':>10}")
    for key, label in ROWS:
        cells = []
        for split in ("train", "test"):
            value = result[split].get(key)
            cells.append(
                "-" if value is None else f"{value:.1f}%" if isinstance(value, float) else str(value)
            )
        print(f"{label:40}" + "".join(f"{c:>10}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
