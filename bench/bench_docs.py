"""Time of a full `triage docs build`, HTML and Markdown, as a user runs it.

    python bench/bench_docs.py [--runs N]

Target: a full build (the whole `triage docs build` process, from start to exit) under 1 s on
the project's 2-core machine. Prints the median whole-process time for each format, and an
in-process breakdown (loading the knowledge, rendering, writing) to show where the time goes.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 1.0


def timed_cli(fmt: str, runs: int) -> float:
    samples = []
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(runs):
            out = Path(tmp) / f"site{run}"
            cmd = [sys.executable, "-m", "triage", "docs", "build", "--format", fmt, "--out", str(out)]
            start = time.perf_counter()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, cwd=REPO, check=True)
            samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def breakdown() -> dict[str, float]:
    sys.path.insert(0, str(REPO))
    from triage.kb.loader import load_kb
    from triage.site.builder import _html_files, build

    start = time.perf_counter()
    kb = load_kb(REPO / "knowledge", use_compiled=False)
    loaded = time.perf_counter()
    _html_files(kb)
    rendered = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        build(kb, Path(tmp) / "site")
    built = time.perf_counter()
    return {
        "load knowledge from YAML (no compiled.json)": loaded - start,
        "render every HTML page, SVG and search index": rendered - loaded,
        "build() again: render + write": built - rendered,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    timed_cli("html", 1)  # warm the page cache and bytecode
    results = {fmt: timed_cli(fmt, args.runs) for fmt in ("html", "markdown")}
    for fmt, seconds in results.items():
        print(
            f"triage docs build --format {fmt:8}  median {seconds * 1000:7.1f} ms  ({args.runs} runs, whole process)"
        )
    for label, seconds in breakdown().items():
        print(f"  in process: {label:46} {seconds * 1000:7.1f} ms")
    worst = max(results.values())
    print(f"full build {worst:.3f} s (target < {TARGET_S:g} s): {'met' if worst < TARGET_S else 'NOT met'}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
