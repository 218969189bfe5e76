"""`triage lint` on real code: findings per rule on maintained projects' training scripts, and
recall on real bugs, each on the split it belongs to.

    python bench/bench_lint_real.py [--list] [--clean DIR] [--buggy DIR]

- eval/lint/clean/: training scripts that maintained projects ship, presumed free of the bugs the
  lint looks for. Every finding there is either a real bug (then the file moves to buggy/) or a
  false positive. Printed per rule and severity.
- eval/lint/buggy/: one real bug per file (a GitHub thread, a fix commit, or a review of the code),
  with the code the lint should give in an `# expect: TRGxxx` line. Recall = files where it fires.

Every file belongs to `train` (tune on it) or `test` (only measured) by a hash of its source
(eval/lint/README.md): a file of a repository hashes the repository, so a project's files stay on
one side; a thread or a commit hashes itself. `--list` prints every clean-set finding and every
buggy-set miss of the train split only; test figures are counts.
"""

from __future__ import annotations

import argparse
import hashlib
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
SPLITS = ("train", "test")
TEST_BUCKETS = 3  # sha256(key) % 10 < 3 is test, as for the corpus (eval/README.md)
_EXPECT = re.compile(r"^# expect: (TRG\d{3})", re.MULTILINE)
_SOURCE = re.compile(r"(https?://\S+)")
_REPOSITORY_FILE = re.compile(r"^(https://github\.com/[^/]+/[^/]+)/(?:blob|tree|raw)/")


def split_key(source: str) -> str:
    """What decides a file's split: the repository of a file URL, else the thread or commit."""
    url = source.split("#", 1)[0].split("?", 1)[0].rstrip("/")
    match = _REPOSITORY_FILE.match(url)
    return (match.group(1) if match else url).lower()


def split_of(text: str) -> str:
    """`train` or `test` for one eval file, from the first URL of its header."""
    match = _SOURCE.search("\n".join(text.splitlines()[:3]))
    key = split_key(match.group(1)) if match else text
    bucket = int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % 10
    return "test" if bucket < TEST_BUCKETS else "train"


def clean_findings(clean: Path = CLEAN) -> dict[str, tuple[int, list[Finding]]]:
    """Per split: how many clean files, and every finding on them."""
    result: dict[str, tuple[int, list[Finding]]] = {s: (0, []) for s in SPLITS}
    for path in sorted(clean.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        split = split_of(text)
        files, found = result[split]
        result[split] = (files + 1, found + lint_source(text, _shown(path)))
    return result


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def buggy_results(buggy: Path = BUGGY) -> dict[str, list[tuple[str, str, set[str]]]]:
    """Per split: (file, expected code, codes found) for every file of the buggy set."""
    results: dict[str, list[tuple[str, str, set[str]]]] = {s: [] for s in SPLITS}
    for path in sorted(buggy.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        match = _EXPECT.search(text)
        if match is None:
            continue
        codes = {f.code for f in lint_source(text, path.name)}
        results[split_of(text)].append((path.name, match.group(1), codes))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--list", action="store_true", help="train-split clean findings and buggy misses")
    parser.add_argument(
        "--clean", type=Path, default=CLEAN, help="the clean set's folder (default: %(default)s)"
    )
    parser.add_argument(
        "--buggy", type=Path, default=BUGGY, help="the buggy set's folder (default: %(default)s)"
    )
    args = parser.parse_args()
    started = time.perf_counter()
    clean = clean_findings(args.clean)
    buggy = buggy_results(args.buggy)
    for split in SPLITS:
        files, findings = clean[split]
        per_rule = Counter((f.code, f.severity) for f in findings)
        severities = Counter(f.severity for f in findings)
        print(f"[{split}] clean set: {files} real scripts, {len(findings)} findings", end="")
        print(" (" + ", ".join(f"{severities[s]} {s}" for s in ("error", "warning", "info")) + ")")
        for (code, severity), count in sorted(per_rule.items()):
            print(f"  {code} {severity:<8} {count}")
        if args.list and split == "train":
            for f in findings:
                print(f"    {f.text()}")
        results = buggy[split]
        hits = [r for r in results if r[1] in r[2]]
        print(f"[{split}] buggy set: {len(results)} real bugs, recall {len(hits)}/{len(results)}", end="")
        print(f" = {len(hits) / max(1, len(results)):.0%}")
        if split == "train":
            for name, expected, codes in results:
                if expected not in codes:
                    print(f"  missed {expected} in {name} (found: {', '.join(sorted(codes)) or 'nothing'})")
    print(f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
