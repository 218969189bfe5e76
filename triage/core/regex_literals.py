"""The literal text every match of a regular expression must contain.

Both matchers use it as a prefilter: `triage ask` skips a signature's regex on a line without its
required literal, and the log scanner only hands a line to the regexes when it holds one of a
signature's anchors. Found from the stdlib's parse of the pattern, so it is sound: a line without
the text cannot match.
"""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]  # the stdlib's regex parser (3.11+)
import re._parser as _parse  # type: ignore[import-not-found]
from typing import Any

MIN_LITERAL = 3
# Words on most lines of a healthy training log: a literal made of one of them would pass every
# line to the regexes, so another required part of the pattern is chosen when there is one.
COMMON_WORDS = frozenset({"loss", "rank", "node", "step", "epoch", "thread ", "train", "data", "time"})

# A requirement is a set of alternatives (lower case), one of which every match contains.
Requirement = tuple[str, ...]


def requirements(pattern: str) -> list[Requirement]:
    """Every requirement `pattern` imposes (searched case-insensitively); [] if it does not parse."""
    try:
        parsed = _parse.parse(pattern, re.IGNORECASE)
    except re.error:
        return []
    return _requirements(list(parsed))


def best_requirement(pattern: str) -> Requirement:
    """The requirement that filters log lines best (see `best`); () when there is none."""
    return best(requirements(pattern))


def required_literal(pattern: str) -> str | None:
    """The longest single text every match contains, lower-cased; None when none is 3 or more long
    (a top-level alternation, say), in which case the regex is always tried."""
    single = [r[0] for r in requirements(pattern) if len(r) == 1 and len(r[0]) >= MIN_LITERAL]
    return max(single, key=len) if single else None


def _requirements(items: list[tuple[Any, Any]]) -> list[Requirement]:
    """Every requirement a sequence of parsed regex items imposes."""
    found: list[Requirement] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            found.append(("".join(run),))
            run.clear()

    for op, av in items:
        if op is _c.LITERAL:
            run.append(chr(av).lower())
            continue
        close_run()
        if op is _c.SUBPATTERN:
            found.extend(_requirements(list(av[-1])))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and av[0] >= 1:
            found.extend(_requirements(list(av[2])))
        elif op is _c.BRANCH:
            options: list[str] = []
            for alternative in av[1]:
                chosen = best(_requirements(list(alternative)))
                if not chosen:
                    options = []
                    break
                options.extend(chosen)
            if options:
                found.append(tuple(options))
        elif op is _c.IN and len(av) == 1 and av[0][0] is _c.LITERAL:
            run.append(chr(av[0][1]).lower())
            continue
    close_run()
    return found


def best(found: list[Requirement]) -> Requirement:
    """The requirement that filters best: no common word, long texts, few alternatives."""
    usable = [r for r in found if all(len(text) >= MIN_LITERAL for text in r)]
    if not usable:
        return ()
    return max(
        usable,
        key=lambda r: (
            not any(t.strip() in COMMON_WORDS for t in r),
            min(len(t) for t in r) >= 6,
            -len(r),
            min(len(t) for t in r),
        ),
    )
