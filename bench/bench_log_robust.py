"""Whether `triage log` reads a failure the same way whatever shape the paste took.

    python bench/bench_log_robust.py                 # per shape: how often the diagnosis holds
    python bench/bench_log_robust.py --show CHANGED  # the items one shape changes (train and repro only)

The same real output reaches users in many shapes: torch >= 2.4 puts `[rankN]:` in front of every
line, collectors put timestamps, a forum or an issue loses the newlines or wraps long lines, a
Windows terminal ends lines with CR LF. Each shape is applied to every harvested reproduction output
(tests/repro/data, torch 2.13 CPU/gloo, every setting; the console only) and to every TRAIN log of
the corpus; an item holds when its first diagnosis and first failing rank stay what the plain text
gets. Test items are never read here.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from corpus import load  # noqa: E402

from triage.core.model import KnowledgeBase  # noqa: E402

ARCHIVE = REPO / "tests" / "repro" / "data" / "outputs.tar.gz"


def _lines(transform: Callable[[str], str]) -> Callable[[str], str]:
    return lambda text: "\n".join(transform(line) for line in text.splitlines())


def _wrapped(width: int) -> Callable[[str], str]:
    def wrap(text: str) -> str:
        out: list[str] = []
        for line in text.splitlines():
            out.extend(textwrap.wrap(line, width, drop_whitespace=False, replace_whitespace=False) or [""])
        return "\n".join(out)

    return wrap


SHAPES: dict[str, Callable[[str], str]] = {
    "crlf": lambda text: text.replace("\n", "\r\n"),
    "kubectl-time": _lines(lambda line: f"2026-11-23T09:00:00.123456789Z {line}"),
    "pdsh-host": _lines(lambda line: f"node-3: {line}"),
    "ansi": _lines(lambda line: f"\x1b[0;31m{line}\x1b[0m"),
    "wrapped-120": _wrapped(120),
    "wrapped-80": _wrapped(80),
    "no-newlines": lambda text: re.sub(r"\s*\n\s*", " ", text),
}


def _verdict(kb: KnowledgeBase, signatures: object, text: str) -> tuple[str | None, int | None]:
    from triage.core.logscan.scanner import Scanner
    from triage.core.logscan.verdict import decide

    scanner = Scanner(signatures)  # type: ignore[arg-type]
    scanner.feed_block(scanner.source("paste"), text.encode("utf-8", "replace"), 1)
    verdict = decide(scanner.scan, kb)
    top = verdict.diagnoses[0].entry_id if verdict.found and verdict.diagnoses else None
    return top, verdict.first_rank


def items() -> list[tuple[str, str]]:
    from triage.repro.harvest import read_archive

    found = [(f"repro:{run}", files[0][1]) for run, files in sorted(read_archive(ARCHIVE).items()) if files]
    found += [(i.origin, i.text) for i in load("logs") if i.split == "train"]
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--show", choices=sorted(SHAPES), help="list the items this shape changes")
    args = parser.parse_args(argv)
    from triage.core.logscan.patterns import compile_signatures
    from triage.kb.loader import load_kb

    kb = load_kb()
    signatures = compile_signatures(kb)
    corpus = items()
    plain = {name: _verdict(kb, signatures, text) for name, text in corpus}
    print(f"{'shape':14}{'repro held':>12}{'train held':>12}")
    for shape, transform in SHAPES.items():
        if args.show and shape != args.show:
            continue
        held = {"repro": [0, 0], "train": [0, 0]}
        for name, text in corpus:
            got = _verdict(kb, signatures, transform(text))
            group = "repro" if name.startswith("repro:") else "train"
            held[group][1] += 1
            same = got == plain[name]
            held[group][0] += same
            if args.show and not same:
                print(f"  CHANGED {name}: {plain[name]} -> {got}")
        cells = "".join(f"{100 * ok / max(n, 1):>11.1f}%" for ok, n in held.values())
        print(f"{shape:14}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
