"""Signature regexes that cannot hang a scan, in Python and in the docs site's JavaScript.

Both engines backtrack, so a careless pattern can take exponential time (`(a+)+$`) or quadratic
time (`rank\\s*\\d+.*exhausted` on a line repeating `rank1 `). Three guarantees, each cheap:

- `hazards` (the `kb check` rule KB019) rejects the shapes that blow up: a quantifier inside an
  unbounded quantifier, alternatives that can match the same text inside a repeat, and two
  unbounded repeats in a row that can match the same characters (`\\d+.*`, `.*\\s*`, so also a `.*`
  between two unbounded classes);
- `bounded` rewrites every unbounded repeat (`*`, `+`, `{m,}`) to at most MAX_GAP repetitions, so
  the work from one starting position is bounded and a whole search is linear in the text;
- `windows` hands a signature at most MATCH_CHARS characters at a time: a short text whole, a long
  one only around the first few places its literal anchor occurs (a per-line budget).

The site's search (triage/site/assets/search.js) applies the same three, with data computed here.
"""

from __future__ import annotations

import re
import re._constants as _c  # type: ignore[import-not-found]  # the stdlib parser (3.11+)
import re._parser as _parser  # type: ignore[import-not-found]
from collections.abc import Callable, Iterator
from typing import Any

MAX_GAP = 256  # the most repetitions an unbounded quantifier may take
MATCH_CHARS = 4096  # a text longer than this is searched in windows around the anchor
MAX_WINDOWS = 8  # windows tried per text: past them the signature is not looked for
_QUANTIFIER = re.compile(r"\{(\d*),(\d*)\}")
# Characters that stand for every class a pattern can name: ASCII, some Latin-1, and a few others.
_SAMPLE = [chr(i) for i in range(256)] + ["\u0394", "\u4e2d", "\u2028", "\u00a0", "\U0001f600"]


def bounded(pattern: str, gap: int = MAX_GAP) -> str:
    """`pattern` with `*`, `+`, `{m,}` and `{m,n}` (n > gap) limited to `gap` repetitions.

    A textual rewrite that knows escapes and character classes, so the result is the same
    regex for Python and JavaScript; everything else is copied as it is."""
    out: list[str] = []
    i, size = 0, len(pattern)
    while i < size:
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
        elif char == "[":
            end = _class_end(pattern, i)
            out.append(pattern[i:end])
            i = end
        elif char in "*+" and out and out[-1] not in ("(", "|") and not _is_quantifier(out[-1]):
            out.append(f"{{{0 if char == '*' else 1},{gap}}}")
            i += 1
        elif char == "{" and (match := _QUANTIFIER.match(pattern, i)) and match.group(1):
            low = int(match.group(1))
            high = match.group(2)
            out.append(f"{{{low},{max(low, gap)}}}" if not high or int(high) > gap else match.group(0))
            i = match.end()
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _is_quantifier(token: str) -> bool:
    return token in ("*", "+", "?") or (token.startswith("{") and token.endswith("}") and len(token) > 2)


def _class_end(pattern: str, start: int) -> int:
    """The index just past the character class opening at `start`."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "^":
        i += 1
    if i < len(pattern) and pattern[i] == "]":
        i += 1  # a `]` first in a class is a literal
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    return len(pattern)


# -- hazards: the kb check rule ------------------------------------------------------------


def hazards(pattern: str) -> str | None:
    """Why `pattern` can take super-linear time to search, or None when its shape is safe."""
    try:
        parsed = _parser.parse(pattern, re.IGNORECASE)
    except re.error:
        return None  # KB005 reports it
    return _sequence_hazard(list(parsed), inside_repeat=False)


def _unbounded(av: Any) -> bool:
    return bool(av[1] == _c.MAXREPEAT)


def _sequence_hazard(items: list[tuple[Any, Any]], inside_repeat: bool) -> str | None:
    previous: tuple[str, set[str]] | None = None  # the last unbounded repeat, and what it matches
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            body = list(av[2])
            if (_unbounded(av) and _contains_repeat(body)) or (av[1] > 1 and _contains_repeat(body, True)):
                return f"a quantifier inside the quantifier on {_show(body)} (nested quantifiers)"
            if _unbounded(av) and _overlapping_branches(body):
                return f"alternatives that can match the same text inside the repeat of {_show(body)}"
            found = _sequence_hazard(body, inside_repeat or _unbounded(av))
            if found:
                return found
            chars = _chars(body)
            if _unbounded(av):
                if previous is not None and previous[1] & chars:
                    return (
                        f"two unbounded repeats in a row ({previous[0]} then {_show(body)}) can match the "
                        "same characters"
                    )
                previous = (_show(body), chars)
            elif av[0] > 0:
                previous = None
            continue
        if op is _c.SUBPATTERN:
            found = _sequence_hazard(list(av[-1]), inside_repeat)
        elif op is _c.BRANCH:
            found = next((h for b in av[1] if (h := _sequence_hazard(list(b), inside_repeat))), None)
        else:
            found = None
        if found:
            return found
        if _min_width([(op, av)]) > 0:
            previous = None  # a required item separates the repeats around it
    return None


def _contains_repeat(items: list[tuple[Any, Any]], unbounded_only: bool = False) -> bool:
    """Whether `items` hold a quantifier that varies (with `unbounded_only`: an unbounded one)."""
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            if (_unbounded(av) if unbounded_only else av[0] != av[1]) or _contains_repeat(
                list(av[2]), unbounded_only
            ):
                return True
        elif (op is _c.SUBPATTERN and _contains_repeat(list(av[-1]), unbounded_only)) or (
            op is _c.BRANCH and any(_contains_repeat(list(b), unbounded_only) for b in av[1])
        ):
            return True
    return False


def _overlapping_branches(items: list[tuple[Any, Any]]) -> bool:
    for op, av in items:
        if op is _c.SUBPATTERN:
            return _overlapping_branches(list(av[-1]))
        if op is _c.BRANCH:
            firsts = [_first_chars(list(b)) for b in av[1]]
            return any(firsts[i] & firsts[j] for i in range(len(firsts)) for j in range(i + 1, len(firsts)))
    return False


def _min_width(items: list[tuple[Any, Any]]) -> int:
    try:
        return int(_parser.SubPattern(_parser.State(), list(items)).getwidth()[0])
    except Exception:
        return 0


def _first_chars(items: list[tuple[Any, Any]]) -> set[str]:
    """What the first character of a match of `items` can be (sampled)."""
    found: set[str] = set()
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            found |= _first_chars(list(av[2]))
            if av[0] > 0:
                return found
            continue
        if op is _c.SUBPATTERN:
            sub = list(av[-1])
            found |= _first_chars(sub)
            if _min_width(sub) > 0:
                return found
            continue
        if op is _c.BRANCH:
            for branch in av[1]:
                found |= _first_chars(list(branch))
            return found
        if op in (_c.AT, _c.ASSERT, _c.ASSERT_NOT):
            continue
        return found | _chars([(op, av)])
    return found


def _chars(items: list[tuple[Any, Any]]) -> set[str]:
    """Every character some match of `items` can consume (sampled, case folded)."""
    found: set[str] = set()
    for op, av in items:
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, getattr(_c, "POSSESSIVE_REPEAT", None)):
            found |= _chars(list(av[2]))
        elif op is _c.SUBPATTERN:
            found |= _chars(list(av[-1]))
        elif op is _c.BRANCH:
            for branch in av[1]:
                found |= _chars(list(branch))
        elif op in (_c.LITERAL, _c.NOT_LITERAL, _c.ANY, _c.IN):
            found |= {ch for ch in _SAMPLE if _matches_one(op, av, ch)}
        elif op is _c.GROUPREF:
            found |= set(_SAMPLE)
    return found


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


_CATEGORIES: dict[str, Callable[[str], bool]] = {
    "CATEGORY_DIGIT": str.isdigit,
    "CATEGORY_SPACE": str.isspace,
    "CATEGORY_WORD": _word,
}


def _category(name: str, ch: str) -> bool:
    negated = name.startswith("CATEGORY_NOT_")
    base = name.replace("CATEGORY_NOT_", "CATEGORY_")
    test = _CATEGORIES.get(base)
    hit = bool(test(ch)) if test is not None else True
    return hit != negated


def _matches_one(op: Any, av: Any, ch: str) -> bool:
    folded = {c for c in (ch, ch.lower(), ch.upper()) if len(c) == 1}
    if op is _c.ANY:
        return ch != "\n"
    if op is _c.LITERAL:
        return chr(av) in folded or chr(av).lower() in folded
    if op is _c.NOT_LITERAL:
        return not (chr(av) in folded or chr(av).lower() in folded)
    negate = False
    hit = False
    for sub_op, sub_av in av:
        if sub_op is _c.NEGATE:
            negate = True
        elif sub_op is _c.LITERAL:
            hit = hit or chr(sub_av).lower() in {c.lower() for c in folded}
        elif sub_op is _c.RANGE:
            hit = hit or any(sub_av[0] <= ord(c) <= sub_av[1] for c in folded)
        elif sub_op is _c.CATEGORY:
            hit = hit or _category(str(sub_av), ch)
    return hit != negate


def _show(items: list[tuple[Any, Any]]) -> str:
    """A readable name for a repeated item: `.`, `\\d`, a class, a group."""
    if len(items) == 1:
        op, av = items[0]
        if op is _c.ANY:
            return "`.`"
        if op is _c.IN and len(av) == 1 and av[0][0] is _c.CATEGORY:
            names = {"DIGIT": "\\d", "NOT_DIGIT": "\\D", "SPACE": "\\s", "NOT_SPACE": "\\S"}
            names |= {"WORD": "\\w", "NOT_WORD": "\\W"}
            return f"`{names.get(str(av[0][1]).replace('CATEGORY_', ''), 'a class')}`"
        if op is _c.LITERAL:
            return f"`{chr(av)}`"
        if op is _c.IN:
            return "a character class"
    return "a group"


# -- windows: a per-text budget ------------------------------------------------------------


def reach(pattern: str) -> int:
    """How far a match of the bounded `pattern` can extend from any character of it."""
    try:
        high = _parser.parse(pattern, re.IGNORECASE).getwidth()[1]
    except re.error:
        return MATCH_CHARS
    return int(min(high, MATCH_CHARS))


def windows(text: str, lowered: str, anchors: tuple[str, ...], span: int) -> Iterator[str]:
    """The parts of `text` a signature is searched in: all of it when it is short, else a window
    of `span` characters either side of each of the first MAX_WINDOWS places an anchor occurs
    (`lowered` is text.lower(); no anchors: the first MATCH_CHARS characters)."""
    if len(text) <= MATCH_CHARS:
        yield text
        return
    if not anchors:
        yield text[:MATCH_CHARS]
        return
    starts: list[int] = []
    for anchor in anchors:
        position = lowered.find(anchor)
        while position != -1 and len(starts) < MAX_WINDOWS * len(anchors):
            starts.append(position)
            position = lowered.find(anchor, position + max(1, span))
    starts.sort()
    covered = -1
    for position in starts[:MAX_WINDOWS]:
        low = max(covered, position - span, 0)
        high = position + span + max(len(a) for a in anchors)
        if high > low:
            yield text[low:high]
        covered = high
