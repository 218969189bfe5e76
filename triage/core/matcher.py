"""Ranking entries for free text or pasted error output (`triage ask`, the TUI's search box).

Three signals per entry, combined into one calibrated score in [0, 1]:
- signatures: an entry's regexes found in the text (pasted errors are the strongest evidence);
- lexical: BM25 over the entry's title, summary, symptoms and fix, normalised by the best score
  the query could reach, so it reads as "how much of what you said this entry explains";
- fuzzy: rapidfuzz similarity to the closest symptom phrasing, which forgives typos and word order.
A best score under NO_MATCH_BELOW means nothing matches well, and the answer says so.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Literal, NamedTuple

from triage.core.model import Entry, KnowledgeBase, QuestionNode
from triage.core.safe_regex import bounded, reach, windows
from triage.core.text import Normalizer

Verdict = Literal["match", "no_match", "out_of_scope"]

# Field weights for the lexical index: what users type resembles symptoms and titles most.
FIELD_WEIGHTS = (("title", 2.0), ("summary", 1.0), ("symptoms", 1.5), ("root_cause", 0.25), ("fix", 0.2))
BM25_K1 = 1.2
BM25_B = 0.4
# Combination weights, chosen by leave-one-symptom-out accuracy on the knowledge itself (phrasings
# the index has never seen; bench/bench_ask_eval.py --loo) rather than by the small dev set.
W_SIGNATURE = 1.6
W_LEXICAL = 1.0
W_FUZZY = 0.3
# Calibration: a logistic fitted (maximum likelihood) to whether the top hit was right, over the
# leave-one-out phrasings plus off-topic questions. A score reads as "how often an answer this
# strong is the right one"; under 0.5 the answer is "nothing matches well".
CAL_SLOPE = 2.5
CAL_MIDPOINT = 0.40
NO_MATCH_BELOW = 0.5
ECHO_FACTOR = 0.6
MAX_QUERY_CHARS = 1_000_000
MAX_FUZZY_TOKENS = 200  # distinct query tokens compared with the symptom phrasings


class Hit(NamedTuple):
    """An entry that matched a query, with its score and why."""

    entry: Entry
    score: float
    reasons: tuple[str, ...] = ()


class Match(NamedTuple):
    """A query's verdict and its ranked hits."""

    query: str
    verdict: Verdict
    hits: tuple[Hit, ...]

    @property
    def best(self) -> Hit | None:
        return self.hits[0] if self.hits else None


class _Signature(NamedTuple):
    pattern: str
    weight: float
    echo: bool
    literal: str | None  # lower-case text every match must contain: a cheap test before the regex
    safe: str  # the pattern with its repeats bounded (safe_regex.bounded): what is searched
    reach: int  # how far a match extends around the literal (the windows of a long text)


class _Doc(NamedTuple):
    entry: Entry
    length: float
    phrases: list[str]  # normalised symptom phrasings and title, for fuzzy matching
    signatures: list[_Signature]


def _signature_data(pattern: str, weight: float, echo: bool) -> list[object]:
    from triage.core.regex_literals import required_literal

    safe = bounded(pattern)
    return [pattern, weight, echo, required_literal(pattern), safe, reach(safe)]


def build_index_data(kb: KnowledgeBase) -> dict[str, object]:
    """The query-independent part of matching, as JSON-ready data (stored in compiled.json)."""
    normalizer = Normalizer(kb.vocabulary)
    docs: dict[str, object] = {}
    df: Counter[str] = Counter()
    for entry in kb.entries.values():
        tf: dict[str, float] = {}
        for name, weight in FIELD_WEIGHTS:
            value = getattr(entry, name)
            text = " ".join(value) if isinstance(value, tuple) else value
            for token in normalizer.tokens(text):
                tf[token] = round(tf.get(token, 0.0) + weight, 4)
        tf[entry.id.lower()] = tf.get(entry.id.lower(), 0.0) + 3.0
        phrases = [" ".join(normalizer.tokens(s)) for s in (*entry.symptoms, entry.title)]
        signatures = [_signature_data(s.pattern, s.weight, s.echo) for s in entry.signatures]
        docs[entry.id] = {
            "tf": tf,
            "length": round(sum(tf.values()), 4),
            "phrases": [p for p in phrases if p],
            "signatures": signatures,
        }
        df.update(tf.keys())
    count = max(len(docs), 1)
    idf = {t: round(math.log(1 + (count - n + 0.5) / (n + 0.5)), 6) for t, n in df.items()}
    lengths = [d["length"] for d in docs.values() if isinstance(d, dict)]
    return {"docs": docs, "idf": idf, "avg_length": sum(lengths) / count if lengths else 1.0, "count": count}


def compact_index(full: dict[str, object]) -> dict[str, object]:
    """The form stored in compiled.json: term weights as an inverted index of posting strings
    ("idf;doc:weight doc:weight"), which `ask` decodes only for the query's own tokens. Parsing
    every entry's term dictionary instead was the largest part of loading the knowledge."""
    docs = full["docs"]
    idf = full["idf"]
    assert isinstance(docs, dict) and isinstance(idf, dict)
    postings: dict[str, list[str]] = {}
    for position, raw in enumerate(docs.values()):
        for token, weight in raw["tf"].items():
            postings.setdefault(token, []).append(f"{position}:{weight!r}")
    return {
        "postings": {t: f"{idf[t]!r};" + " ".join(items) for t, items in sorted(postings.items())},
        "docs": {k: {f: v[f] for f in ("length", "phrases", "signatures")} for k, v in docs.items()},
        "avg_length": full["avg_length"],
        "count": full["count"],
    }


class Index:
    """Everything about the knowledge base that does not depend on the query."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.normalizer = Normalizer(kb.vocabulary)
        data = kb.match_index if kb.match_index is not None else compact_index(build_index_data(kb))
        raw_docs = data["docs"]
        postings = data["postings"]
        avg_length = data["avg_length"]
        count = data["count"]
        assert isinstance(raw_docs, dict) and isinstance(postings, dict)
        assert isinstance(avg_length, float | int) and isinstance(count, int)
        self.docs: list[_Doc] = []
        for entry in kb.entries.values():
            raw = raw_docs[entry.id]
            sigs = [_Signature(*fields) for fields in raw["signatures"]]
            self.docs.append(_Doc(entry, raw["length"], raw["phrases"], sigs))
        self._postings: dict[str, str] = postings
        self._decoded: dict[str, tuple[float, list[tuple[int, float]]]] = {}
        self.avg_length = float(avg_length)
        self.max_idf = math.log(1 + (count + 0.5) / 0.5)

    def posting(self, token: str) -> tuple[float, list[tuple[int, float]]] | None:
        """(idf, [(doc position, term weight), ...]) for a token, or None when no entry has it."""
        decoded = self._decoded.get(token)
        if decoded is None:
            raw = self._postings.get(token)
            if raw is None:
                return None
            idf, _, items = raw.partition(";")
            pairs = [item.split(":") for item in items.split(" ")]
            decoded = (float(idf), [(int(d), float(w)) for d, w in pairs])
            self._decoded[token] = decoded
        return decoded


_INDEXES: dict[int, tuple[KnowledgeBase, Index]] = {}


def index_for(kb: KnowledgeBase) -> Index:
    """The matcher's index for a knowledge base (built once, then cached)."""
    cached = _INDEXES.get(id(kb))
    if cached is None or cached[0] is not kb:
        cached = (kb, Index(kb))
        _INDEXES[id(kb)] = cached
    return cached[1]


def _signature_score(doc: _Doc, text: str, lowered: str) -> tuple[float, list[str]]:
    best = 0.0
    found = 0
    reasons = []
    for sig in doc.signatures:
        if sig.literal is not None and sig.literal not in lowered:
            continue
        anchors = (sig.literal,) if sig.literal is not None else ()
        m = next(
            (
                hit
                for part in windows(text, lowered, anchors, sig.reach)
                if (hit := re.search(sig.safe, part, re.IGNORECASE | re.MULTILINE))
            ),
            None,
        )
        if m is None:
            continue
        found += 1
        value = sig.weight * (ECHO_FACTOR if sig.echo else 1.0)
        best = max(best, value)
        reasons.append(f"error text matches {sig.pattern!r}: {m.group(0)[:80]!r}")
    if found > 1:
        best = min(1.0, best + 0.1 * (found - 1))
    return best, reasons


def _lexical_scores(index: Index, tokens: list[str]) -> list[float]:
    scores = [0.0] * len(index.docs)
    if not tokens:
        return scores
    norms = [BM25_K1 * (1 - BM25_B + BM25_B * d.length / index.avg_length) for d in index.docs]
    ideal = 0.0
    for token in set(tokens):
        posting = index.posting(token)
        if posting is None:
            ideal += index.max_idf * (BM25_K1 + 1)  # a word no entry uses still counts against coverage
            continue
        idf, items = posting
        ideal += idf * (BM25_K1 + 1)
        for position, tf in items:
            scores[position] += idf * tf * (BM25_K1 + 1) / (tf + norms[position])
    return [s / ideal for s in scores] if ideal else scores


def _fuzzy_scores(index: Index, tokens: list[str]) -> list[float]:
    from rapidfuzz import fuzz

    if not tokens:
        return [0.0] * len(index.docs)
    # token_set_ratio compares sets, so repeats change nothing; the cap keeps a pasted megabyte from
    # costing a minute (the site's search applies the same cap).
    query = " ".join(list(dict.fromkeys(tokens))[:MAX_FUZZY_TOKENS])
    return [
        max((fuzz.token_set_ratio(query, p) for p in doc.phrases), default=0.0) / 100 for doc in index.docs
    ]


def calibrate(raw: float) -> float:
    """A raw score mapped to a 0..1 confidence."""
    return 1 / (1 + math.exp(-CAL_SLOPE * (raw - CAL_MIDPOINT)))


def rank(kb: KnowledgeBase, text: str, top: int = 5) -> Match:
    """Entries best first with calibrated scores; the verdict says whether any matches well."""
    index = index_for(kb)
    text = text[:MAX_QUERY_CHARS]
    tokens = index.normalizer.tokens(text)
    lexical = _lexical_scores(index, tokens)
    fuzzy = _fuzzy_scores(index, tokens)
    hits = []
    lowered = text.lower()
    for doc, lex, fz in zip(index.docs, lexical, fuzzy, strict=True):
        sig, reasons = _signature_score(doc, text, lowered)
        raw = W_SIGNATURE * sig + W_LEXICAL * lex + W_FUZZY * fz
        if lex > 0:
            reasons.append(f"words in common: {lex:.0%} of the query's weight")
        hits.append(Hit(doc.entry, round(calibrate(raw), 3), tuple(reasons)))
    hits.sort(key=lambda h: (-h.score, h.entry.id))
    chosen = tuple(hits[: max(top, 1)])
    best = chosen[0] if chosen else None
    if best is None or best.score < NO_MATCH_BELOW:
        verdict: Verdict = "no_match"
    elif not best.entry.covered:
        verdict = "out_of_scope"
    else:
        verdict = "match"
    return Match(text, verdict, chosen)


def rank_options(node: QuestionNode, text: str, kb: KnowledgeBase | None = None) -> list[tuple[int, float]]:
    """How well free text answers each option of a question: (option index, 0..1), best first.

    With the knowledge base, its vocabulary applies ("frozen" meets "hangs")."""
    from rapidfuzz import fuzz

    normalizer = index_for(kb).normalizer if kb is not None else Normalizer({})
    query = " ".join(normalizer.tokens(text))
    scored = []
    for i, option in enumerate(node.options):
        candidates = [option.label, *option.keywords]
        best = (
            max(fuzz.token_set_ratio(query, " ".join(normalizer.tokens(c))) for c in candidates)
            if query
            else 0
        )
        scored.append((i, best / 100))
    scored.sort(key=lambda pair: -pair[1])
    return scored
