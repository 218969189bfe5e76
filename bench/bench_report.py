"""Whole-process time of `triage report`: the quick probes, the inventory, a log, the Markdown.

    python bench/bench_report.py [--runs N]

Target: median under 5 s for `triage report` and `triage report --log <a real failure log>` (the
issue's "finishes in a few seconds"); `--dist` (the mini-test) is printed for information. Bytecode
is compiled first, as `pip install` does.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOG = REPO / "tests" / "core" / "logscan" / "data" / "repro-D20.log"
TARGET_S = 5.0


def timed(args: list[str], runs: int) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "triage", *args], capture_output=True, cwd=REPO, env=env, check=False
        )
        samples.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(
                f"triage {' '.join(args)} exited {done.returncode}: {done.stderr.decode()[-300:]}"
            )
    return statistics.median(samples), max(samples)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compileall.compile_dir(str(REPO / "triage"), quiet=1)
    compileall.compile_dir(str(REPO / "probes"), quiet=1)
    ok = True
    for label, command, target in (
        ("triage report", ["report"], TARGET_S),
        ("triage report --log repro-D20.log", ["report", "--log", str(LOG)], TARGET_S),
        ("triage report --json", ["report", "--json"], TARGET_S),
        ("triage report --dist (information)", ["report", "--dist"], None),
    ):
        runs = 1 if target is None else args.runs
        median, worst = timed(command, runs)
        verdict = "" if target is None else ("  ok" if median <= target else f"  OVER {target:g} s")
        ok = ok and (target is None or median <= target)
        print(f"{label:<40} median {median:5.2f} s  worst {worst:5.2f} s  ({runs} runs){verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
