"""`# triage: ignore[TRG021]` comments: the codes each line silences.

Comments are found with `tokenize`, so the marker inside a string is not a comment. A bare
`# triage: ignore` silences every code on its line.
"""

from __future__ import annotations

import io
import re
import tokenize

_MARKER = re.compile(r"#\s*triage:\s*ignore(?:\[(?P<codes>[^\]]*)\])?", re.IGNORECASE)


def suppressed(source: str) -> dict[int, frozenset[str]]:
    """{line: codes} for every line with an ignore comment (an empty set means every code)."""
    if "triage:" not in source:
        return {}
    found: dict[int, frozenset[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _MARKER.search(token.string)
            if match is None:
                continue
            codes = match.group("codes")
            names = (
                frozenset(c.strip().upper() for c in codes.split(",") if c.strip()) if codes else frozenset()
            )
            found[token.start[0]] = names
    except (tokenize.TokenError, SyntaxError):
        pass  # the parser has already accepted the file; keep what was read
    return found
