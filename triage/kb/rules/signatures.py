"""Rules about signatures, the regular expressions `triage log` and `triage ask` match lines with."""

from __future__ import annotations

import re
from collections.abc import Iterator

from triage.core.model import Entry, Signature
from triage.kb.rules.context import Context
from triage.kb.rules.registry import Finding, rule
from triage.kb.sources import SourceFile


def signatures(ctx: Context) -> Iterator[tuple[SourceFile, Entry, int, Signature]]:
    """(file, entry, index, signature) for every signature with a pattern, in every entry file."""
    for src, entry in ctx.all_entries:
        for index, signature in enumerate(entry.signatures):
            if signature.pattern:
                yield src, entry, index, signature


def compiled(signature: Signature) -> re.Pattern[str] | None:
    """The signature's pattern compiled as the matchers compile it, or None when it does not compile."""
    try:
        return re.compile(signature.pattern, re.IGNORECASE)
    except re.error:
        return None


@rule(
    "KB005",
    "regex-compiles",
    finds="a signature pattern that Python's `re` cannot compile",
    why="the matchers would skip it, so the line it was written for would never be recognised",
    fix="escape literal ( ) [ ] . * + ? with a backslash, and write the pattern in single quotes",
)
def regex_compiles(ctx: Context) -> Iterator[Finding]:
    """Report a signature pattern that Python's `re` cannot compile."""
    for src, _, index, signature in signatures(ctx):
        try:
            re.compile(signature.pattern, re.IGNORECASE)
        except re.error as exc:
            line = ctx.line(src, "signatures", index, "pattern")
            yield Finding(src, line, f"signatures[{index}].pattern", f"regex does not compile ({exc})")


@rule(
    "KB005",
    "regex-not-empty",
    finds="a signature pattern that matches the empty string",
    why="it would match every line of every log, pointing every scan at this entry",
    fix="make the pattern require real text",
)
def regex_not_empty(ctx: Context) -> Iterator[Finding]:
    """Report a signature pattern that matches the empty string."""
    for src, _, index, signature in signatures(ctx):
        regex = compiled(signature)
        if regex is not None and regex.search(""):
            line = ctx.line(src, "signatures", index, "pattern")
            yield Finding(
                src,
                line,
                f"signatures[{index}].pattern",
                "regex matches the empty string, so it would match every line",
            )


@rule(
    "KB019",
    "signature-has-examples",
    finds="a signature with no `examples:`, the real lines of output it was written from",
    why="a pattern nobody has seen match real output is a guess: it may never fire, or fire on the wrong line",
    fix="add `examples:` with a line copied verbatim from a real run or report (`triage repro ID` prints real ones)",
)
def signature_has_examples(ctx: Context) -> Iterator[Finding]:
    """Report a signature with no real example line."""
    for src, _, index, signature in signatures(ctx):
        if compiled(signature) is not None and not signature.examples:
            line = ctx.line(src, "signatures", index, "pattern")
            yield Finding(
                src,
                line,
                f"signatures[{index}].examples",
                "is missing: the signature has no real example line",
            )


@rule(
    "KB019",
    "examples-match",
    finds="a signature whose `examples` include a line its pattern does not match",
    why="the examples are the real lines the signature was written for; one that no longer matches "
    "means the pattern (or the pasted line) is wrong, and `triage log` would miss that failure",
    fix="correct the pattern so it matches the real line (or paste the line verbatim from the thread or log)",
)
def examples_match(ctx: Context) -> Iterator[Finding]:
    """Report a signature whose `examples` include a line its pattern does not match."""
    for src, _, index, signature in signatures(ctx):
        regex = compiled(signature)
        if regex is None:
            continue  # regex-compiles reports it
        for number, example in enumerate(signature.examples):
            if not regex.search(example):
                line = ctx.line(src, "signatures", index, "examples", number)
                yield Finding(
                    src,
                    line,
                    f"signatures[{index}].examples[{number}]",
                    f"the pattern does not match this example: {example[:120]!r}",
                )


@rule(
    "KB020",
    "regex-linear-time",
    finds="a signature pattern whose shape makes a backtracking engine slow: nested quantifiers "
    "(`(a+)+`), alternatives that overlap inside a repeat, or two unbounded repeats in a row that can "
    "match the same characters (`\\d+.*`, a `.*` between two unbounded classes)",
    why="Python's re and the browser's RegExp backtrack: such a pattern takes exponential or quadratic "
    "time on a hostile or merely unlucky line, hanging `triage log`, `ask` and the docs site's search",
    fix="separate the repeats with a required character they cannot both match (`\\d+\\D.*`), or "
    "bound the gap (`.{0,200}`); never put a quantifier inside another",
)
def regex_linear_time(ctx: Context) -> Iterator[Finding]:
    """Report a signature pattern that can take more than linear time on a line."""
    from triage.core.safe_regex import hazards

    for src, _, index, signature in signatures(ctx):
        problem = hazards(signature.pattern)
        if problem is not None:
            line = ctx.line(src, "signatures", index, "pattern")
            yield Finding(
                src, line, f"signatures[{index}].pattern", f"regex can take super-linear time: {problem}"
            )
