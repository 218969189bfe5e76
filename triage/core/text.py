"""Text normalisation shared by the matcher's index and its queries.

Both sides go through the same steps (lower-case, vocabulary rewrite, tokenise, drop stopwords,
light stemming), so a phrasing and an entry meet on the same terms.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_TOKEN_RE = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "then",
        "else",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "over",
        "under",
        "about",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "doing",
        "done",
        "have",
        "has",
        "had",
        "having",
        "i",
        "me",
        "my",
        "mine",
        "we",
        "our",
        "you",
        "your",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "he",
        "she",
        "they",
        "them",
        "their",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "no",
        "nor",
        "not",
        "only",
        "own",
        "same",
        "so",
        "than",
        "too",
        "very",
        "s",
        "t",
        "can",
        "will",
        "just",
        "don",
        "should",
        "now",
        "would",
        "could",
        "may",
        "might",
        "must",
        "shall",
        "im",
        "ive",
        "id",
        "youre",
        "its",
        "dont",
        "doesnt",
        "didnt",
        "cant",
        "cannot",
        "isnt",
        "arent",
        "wasnt",
        "wont",
        "please",
        "help",
        "hi",
        "hello",
        "thanks",
        "thank",
        "anyone",
        "someone",
        "somebody",
        "something",
        "anything",
        "everything",
        "get",
        "gets",
        "got",
        "getting",
        "use",
        "used",
        "using",
        "uses",
        "also",
        "still",
        "even",
        "again",
        "like",
        "want",
        "need",
        "trying",
        "try",
        "tried",
        "seem",
        "seems",
        "seemed",
        "way",
        "one",
        "ever",
        "really",
        "actually",
        "maybe",
        "though",
        "however",
        "while",
        "after",
        "before",
        "during",
        "up",
        "down",
        "out",
        "off",
        "very",
        "much",
        "many",
        "lot",
        "lots",
        "know",
        "think",
        "see",
        "saw",
        "look",
        "looks",
        "looking",
        "run",
        "running",
        "ran",
        "issue",
        "problem",
        "question",
    ]
)


def stem(token: str) -> str:
    """A deliberately small stemmer: consistent on both sides matters more than linguistic accuracy."""
    if len(token) <= 3 or not token.isalpha():
        return token
    if token.endswith("ies") and len(token) > 4:
        token = token[:-3] + "y"
    elif token.endswith("sses") or token.endswith(("ches", "shes", "xes", "zes")):
        token = token[:-2]
    elif token.endswith("s") and not token.endswith(("ss", "us", "is")):
        token = token[:-1]
    if token.endswith("ing") and len(token) >= 7:
        token = token[:-3]
    elif token.endswith("ed") and len(token) >= 6:
        token = token[:-2]
    if token.endswith("e") and len(token) > 4:
        token = token[:-1]
    return token


class Normalizer:
    """Rewrites vocabulary variants to canonical terms, then tokenises.

    Variants are matched as token sequences (longest first), not with one big regex: compiling a
    regex of every variant would cost more than the whole query on the `ask` path."""

    def __init__(self, vocabulary: Mapping[str, list[str] | tuple[str, ...]]) -> None:
        self._variants: dict[tuple[str, ...], str] = {}
        for canonical, words in vocabulary.items():
            for word in words:
                key = tuple(_TOKEN_RE.findall(word.lower()))
                if key:
                    self._variants[key] = canonical.lower()
        self._longest = max((len(k) for k in self._variants), default=0)

    def _canonical(self, raw: list[str]) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(raw):
            for n in range(min(self._longest, len(raw) - i), 0, -1):
                canonical = self._variants.get(tuple(raw[i : i + n]))
                if canonical is not None:
                    out.append(canonical)
                    i += n
                    break
            else:
                out.append(raw[i])
                i += 1
        return out

    def tokens(self, text: str) -> list[str]:
        """Content tokens; compound identifiers (find_unused_parameters) also yield their parts."""
        out: list[str] = []
        for raw in self._canonical(_TOKEN_RE.findall(text.lower())):
            if raw in STOPWORDS:
                continue
            out.append(stem(raw))
            if "_" in raw:
                out.extend(stem(p) for p in raw.split("_") if p and p not in STOPWORDS)
        return out
