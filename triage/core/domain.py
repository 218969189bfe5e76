"""Whether a text holds one of the domain words (knowledge/domain.yaml), without a regex.

The docs site's search reads the words as one regex (triage.core.match_index.domain_pattern);
compiling that alternation cost `ask` about 2 ms of its ~45, so Python reads the same words by
its tokens instead: a word of letters, digits and _ is a whole token or, with a trailing *, a
token's start; a word with a space or a hyphen is found in the text with a boundary on each side.
tests/core/test_domain.py checks that both readings agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_TOKEN = re.compile(r"[a-z0-9_]+")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")


class DomainWords:
    """The domain words, split by how each is found."""

    def __init__(self, words: Iterable[str]) -> None:
        exact: set[str] = set()
        prefixes: list[str] = []
        phrases: list[tuple[str, bool]] = []  # (text, open-ended)
        for word in words:
            stem, star = (word[:-1], True) if word.endswith("*") else (word, False)
            if _TOKEN.fullmatch(stem):
                (prefixes.append(stem) if star else exact.add(stem))
            else:
                phrases.append((stem, star))
        self.exact = frozenset(exact)
        self.prefixes = tuple(prefixes)
        self.phrases = tuple(phrases)

    def holds(self, lowered: str) -> bool:
        """Whether a lower-cased text holds one of the words."""
        for token in _TOKEN.findall(lowered):
            if token in self.exact or token.startswith(self.prefixes):
                return True
        return any(self._phrase(lowered, text, open_ended) for text, open_ended in self.phrases)

    @staticmethod
    def _phrase(lowered: str, text: str, open_ended: bool) -> bool:
        start = lowered.find(text)
        while start >= 0:
            end = start + len(text)
            before = start == 0 or lowered[start - 1] not in _WORD_CHARS
            after = open_ended or end == len(lowered) or lowered[end] not in _WORD_CHARS
            if before and after:
                return True
            start = lowered.find(text, start + 1)
        return False
