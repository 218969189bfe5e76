"""`triage lint` on real code: findings per rule on maintained projects' training scripts, and
recall on real bugs from GitHub threads.

    python bench/bench_lint_real.py [--list]

- eval/lint/clean/: training scripts that maintained projects ship (nanoGPT, pytorch/examples,
  Accelerate, DINO, timm, open_clip, torchtitan, detectron2, Megatron-LM, DeepSpeedExamples,
  Lightning), presumed free of the bugs the lint looks for. Every finding there is either a real
  bug (rare; eval/lint/README.md says which) or a false positive. Printed per rule and severity.
- eval/lint/buggy/: the pattern of a bug that a GitHub thread established, one per file, with the
  code the lint should give in an `# expect: TRGxxx` line. Recall = files where that code fires.

`--list` prints every finding on the clean set and every miss on the buggy set.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from triage.core.lint import Finding, lint_source  # noqa: E402

CLEAN = REPO / "eval" / "lint" / "clean"
BUGGY = REPO / "eval" / "lint" / "buggy"
_EXPECT = re.compile(r"^# expect: (TRG\d{3})", re.MULTILINE)


def clean_findings() -> list[Finding]:
    """Every finding on the clean set."""
    found: list[Finding] = []
    for path in sorted(CLEAN.glob("*.py")):
        found += lint_source(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    return found


def buggy_results() -> list[tuple[str, str, set[str]]]:
    """(file, expected code, codes found) for every file of the buggy set."""
    results = []
    for path in sorted(BUGGY.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        match = _EXPECT.search(text)
        if match is None:
            continue
        codes = {f.code for f in lint_source(text, path.name)}
        results.append((path.name, match.group(1), codes))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="every clean-set finding and buggy-set miss")
    args = parser.parse_args()
    started = time.perf_counter()
    findings = clean_findings()
    files = len(list(CLEAN.glob("*.py")))
    per_rule = Counter((f.code, f.severity) for f in findings)
    severities = Counter(f.severity for f in findings)
    print(f"clean set: {files} real scripts, {len(findings)} findings", end="")
    print(" (" + ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info")) + ")")
    for (code, severity), count in sorted(per_rule.items()):
        print(f"  {code} {severity:<8} {count}")
    if args.list:
        for f in findings:
            print(f"    {f.text()}")
    results = buggy_results()
    hits = [r for r in results if r[1] in r[2]]
    print(f"buggy set: {len(results)} real bugs, recall {len(hits)}/{len(results)}", end="")
    print(f" = {len(hits) / max(1, len(results)):.0%}")
    for name, expected, codes in results:
        if expected not in codes:
            print(f"  missed {expected} in {name} (found: {', '.join(sorted(codes)) or 'nothing'})")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
