"""The query-independent half of matching, computed once when the knowledge is compiled.

For every term of the knowledge base: a weight, how much seeing it in a report says. A word that is
common in ordinary English ("yet", "found", "work") or that many entries use in their symptoms
("training", "gpu") says little; a word that is rare in both ("watchdog", "hostfile") says a lot.
The English frequencies come from a background word list (the `wordfreq` package, consulted only
here, at build time; `triage kb build` passes its lookup in); the knowledge's own spread across
entries stands for generic ML text.

For every entry and term: how strongly the entry carries the term, from the fields it appears in.
Symptoms, titles and error signatures are what reports resemble; root cause and fix are prose about
the remedy and count for much less.

The result is JSON-ready data (stored in compiled.json); triage.core.matcher reads it.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

from triage.core.matcher import INDEX_FORMAT
from triage.core.model import Entry, KnowledgeBase, Signature
from triage.core.text import COLLECTIVES, PAIR, Normalizer, identifiers, pairs, stem

Zipf = Callable[[str], float]  # a word's Zipf frequency in English (log10 per billion words; 0 = unseen)

FIELD_WEIGHTS: tuple[tuple[str, float], ...] = (
    ("title", 1.0),
    ("symptoms", 1.0),
    ("signatures", 0.8),
    ("summary", 0.5),
    ("root_cause", 0.3),
    ("fix", 0.08),
)
EVIDENCE_FIELDS = frozenset({"title", "symptoms", "signatures", "summary"})
DF_FIELDS = EVIDENCE_FIELDS
SATURATION = 3.0  # strength = 1 - exp(-field-weighted count / (SATURATION * length factor))
LENGTH_NORM = 0.4
ZIPF_CEILING = 8.0  # "the" is 7.7: a word this common says (almost) nothing
ENGLISH_FLOOR = 0.05
DOMAIN_SHARE = 0.8  # how much of a term's weight its spread across entries may take away
DOMAIN_OFFSET = 1.0  # the knowledge's prose is about this domain only: its frequencies read this much lower
DEFAULT_ZIPF = 3.0  # without a background word list every word counts as moderately rare
PAIR_FACTOR = 1.0  # a pair of adjacent terms weighs this share of its two terms' mean
# Python's own exception classes say what kind of Python error was raised, not which distributed
# fault raised it: rare in English and in few entries, they would otherwise weigh like a symptom.
BUILTIN_EXCEPTIONS = frozenset(
    """typeerror valueerror runtimeerror attributeerror keyerror indexerror assertionerror importerror
    modulenotfounderror oserror nameerror notimplementederror filenotfounderror permissionerror
    zerodivisionerror recursionerror lookuperror ioerror exception baseexception""".split()  # noqa: SIM905
)
EXCEPTION_WEIGHT = 0.08  # at most: as much as "runtimeerror", which 43 entries carry
REPORT_WEIGHT = 0.3  # a labelled report's term counts this much towards its entry (a symptom: 1.0)
REPORTS_IN_DF = True
REPORT_TERMS = 60  # a report's first terms only: its lead says what it is about
# How far a signature's matches in the labelled train reports and logs bear out its entry
# (knowledge/signature_evidence.yaml): its right share, pulled towards RELIABLE_SHARE by
# PRIOR_MATCHES imagined matches, over RELIABLE_SHARE, capped at 1 and raised to RELIABILITY_POWER,
# scales its weight. "ChildFailedError" matched 9 train items of which 2 were P4's: it says little of
# P4 and now weighs a ninth of what it did; a signature no labelled item matched keeps its weight.
# Chosen by train cross-validation (`bench/confidence_experiments.py signature_evidence`: answered
# right 37.1 -> 45.4 % at about the same precision; the ranking within noise).
PRIOR_MATCHES = 3.0
RELIABLE_SHARE = 0.7
RELIABILITY_POWER = 3.0

Evidence = Mapping[str, Mapping[str, tuple[int, int]]]  # entry id -> pattern -> (matched, right)


def reliability(matched: int, right: int) -> float:
    """The factor a signature's weight is scaled by, from how often its matches were its entry's."""
    if matched <= 0:
        return 1.0
    share = (right + PRIOR_MATCHES * RELIABLE_SHARE) / (matched + PRIOR_MATCHES)
    return float(min(1.0, share / RELIABLE_SHARE) ** RELIABILITY_POWER)


def _literal_text(pattern: str) -> str:
    """A signature's pattern with the regex syntax blanked out: the words a matching line holds."""
    return re.sub(r"\\[sSdDwWbB]|\\.|\[[^\]]*\]|[()|?*+{}^$.]", " ", pattern)


def field_texts(entry: Entry) -> list[tuple[str, str]]:
    """(field, text) for every text an entry is matched on."""
    texts = [("title", entry.title), ("summary", entry.summary)]
    texts += [("symptoms", s) for s in entry.symptoms]
    for sig in entry.signatures:
        texts.append(("signatures", _literal_text(sig.pattern)))
        texts += [("signatures", t) for t in sig.examples]
    texts += [("root_cause", entry.root_cause), ("fix", entry.fix)]
    return texts


def _surfaces(kb: KnowledgeBase, texts: Iterable[str]) -> dict[str, set[str]]:
    """term -> the words that produce it, to look the term up in the background list."""
    found: dict[str, set[str]] = {}
    for text in texts:
        for words in identifiers(text):
            for word in words:
                found.setdefault(stem(word), set()).add(word)
            if len(words) > 1:  # a joined identifier is as common as its words written apart
                found.setdefault(stem("".join(words)), set()).add(" ".join(words))
    vocabulary: dict[str, list[str]] = {k: list(v) for k, v in COLLECTIVES.items()}
    for canonical, variants in kb.vocabulary.items():
        vocabulary.setdefault(canonical, []).extend(variants)
    for canonical, spellings in vocabulary.items():
        found.setdefault(stem(canonical.lower()), set()).update(
            [canonical.lower(), *(v.lower() for v in spellings)]
        )
    return found


def term_weight(zipf: float, entries_with_term: int, entry_count: int) -> float:
    """How much a term says: rare in English, and used by few entries' symptoms."""
    english = min(1.0, max(ENGLISH_FLOOR, (ZIPF_CEILING - zipf) / ZIPF_CEILING))
    spread = math.log((entry_count + 1) / (entries_with_term + 0.5)) / math.log((entry_count + 1) / 0.5)
    return english * (1 - DOMAIN_SHARE + DOMAIN_SHARE * max(0.0, spread))


def build_index_data(
    kb: KnowledgeBase,
    zipf: Zipf | None = None,
    confidence: Mapping[str, object] | None = None,
    reports: Mapping[str, Iterable[str]] | None = None,
    domain_words: Iterable[str] | None = None,
    evidence: Evidence | None = None,
) -> dict[str, object]:
    """Term weights, per-entry term strengths, symptom phrasings and signatures, as JSON-ready data.

    `reports`: entry id -> labelled real reports of it (the corpus's train split), counted as
    further phrasings of its symptoms: how users describe it. `domain_words`: the words that say a text
    is about training (knowledge/domain.yaml), a feature of the confidence model. `evidence`: how
    often each signature's matches in labelled train items were its entry's (see `reliability`)."""
    normalizer = Normalizer(kb.vocabulary)
    strengths: dict[str, dict[str, float]] = {}
    counts_by_entry: dict[str, dict[str, float]] = {}
    evidence_df: Counter[str] = Counter()
    phrases: dict[str, list[list[str]]] = {}
    all_texts: list[str] = []
    lengths: dict[str, float] = {}
    domain: Counter[str] = Counter()  # every term of the knowledge's own text: generic ML prose
    spell = _speller(kb, normalizer, zipf) if reports else None
    for entry in kb.entries.values():
        counts: dict[str, float] = {}
        seen: set[str] = set()
        weights = dict(FIELD_WEIGHTS)
        for field, text in field_texts(entry):
            all_texts.append(text)
            tokens = normalizer.tokens(text)
            domain.update(tokens)
            for term in pairs(tokens) if field in EVIDENCE_FIELDS else tokens:
                counts[term] = counts.get(term, 0.0) + weights[field]
                if field in DF_FIELDS:
                    seen.add(term)
        counts[entry.id.lower()] = counts.get(entry.id.lower(), 0.0) + 2.0
        lengths[entry.id] = sum(counts.values())
        sets = [sorted(set(normalizer.tokens(s))) for s in (entry.title, *entry.symptoms)]
        for report in (reports or {}).get(entry.id, ()):
            all_texts.append(report)
            tokens = normalizer.tokens(report)[:REPORT_TERMS]
            if spell is not None:
                tokens = spell(report, tokens)
            for term in pairs(tokens):
                counts[term] = counts.get(term, 0.0) + REPORT_WEIGHT
                if REPORTS_IN_DF:
                    seen.add(term)
            sets.append(sorted(set(tokens)))
        counts_by_entry[entry.id] = counts
        evidence_df.update(seen)
        phrases[entry.id] = [s for s in sets if s]
    # Saturation per entry, relative to the entry's length (as in BM25): a term carries more weight
    # in a short entry than in one that mentions everything. Its reports do not make it longer.
    average = sum(lengths.values()) / max(len(lengths), 1)
    for entry_id, counts in counts_by_entry.items():
        scale = SATURATION * (1 - LENGTH_NORM + LENGTH_NORM * lengths[entry_id] / average)
        strengths[entry_id] = {t: round(1 - math.exp(-x / scale), 4) for t, x in counts.items()}
    surfaces = _surfaces(kb, all_texts)
    lookup = zipf or (lambda _word: DEFAULT_ZIPF)
    count = max(len(kb.entries), 1)
    terms = sorted({t for s in strengths.values() for t in s})
    domain_total = max(sum(domain.values()), 1)

    def background(term: str) -> float:
        english = max((lookup(w) for w in surfaces.get(term, {term})), default=0.0)
        if not domain[term]:
            return english
        return max(english, math.log10(domain[term] / domain_total * 1e9) - DOMAIN_OFFSET)

    weight = {t: round(term_weight(background(t), evidence_df[t], count), 4) for t in terms if PAIR not in t}
    for t in BUILTIN_EXCEPTIONS & weight.keys():  # kinds of Python error, not faults
        weight[t] = min(weight[t], EXCEPTION_WEIGHT)
    for t in terms:
        if PAIR in t:
            first, second = t.split(PAIR)
            weight[t] = round(PAIR_FACTOR * (weight[first] + weight[second]) / 2, 4)
    return {
        "format": INDEX_FORMAT,
        "weights": weight,
        "strengths": strengths,
        "phrases": phrases,
        "signatures": {
            e.id: [_signature_data(s, (evidence or {}).get(e.id, {}).get(s.pattern)) for s in e.signatures]
            for e in kb.entries.values()
        },
        "confidence": dict(confidence) if confidence else None,
        "variants": normalizer.variant_table(),
        "domain_words": sorted(set(domain_words)) if domain_words else None,  # triage.core.domain
    }


def _speller(
    kb: KnowledgeBase, normalizer: Normalizer, zipf: Zipf | None
) -> Callable[[str, list[str]], list[str]] | None:
    """Reports are users' own words, typos included: a misspelling in one report ("distirbuted")
    would become a term of its own, tied to that report's entry, and a query with the same typo
    would meet it there instead of being corrected to the word it means. So a report's word that
    no entry uses and that is no English word is read as the entry term one edit away (two for
    long words), as `ask` corrects a query's unknown words. Without a background word list there
    is no telling a typo from a rare word, and nothing is changed."""
    if zipf is None:
        return None
    from triage.core.matcher import closest_term

    shapes: dict[tuple[str, int], set[str]] = {}
    for entry in kb.entries.values():
        for _, text in field_texts(entry):
            for term in normalizer.tokens(text):
                if len(term) >= 4 and term.isalpha() and term.isascii():
                    shapes.setdefault((term[0], len(term)), set()).add(term)
    own = {t for found in shapes.values() for t in found}
    fixed: dict[str, str] = {}

    def correct(term: str, surfaces: set[str], report: str) -> str:
        if term in own or len(term) < 5 or not term.isalpha() or not term.isascii():
            return term
        if not surfaces or any(zipf(word) > 0 for word in surfaces):
            return term  # a real word (or one we cannot look up): the user meant it
        if not all(re.search(rf"(?<![\w./]){re.escape(w)}(?![\w(./])", report) for w in surfaces):
            return term  # written in capitals or as code (ReduceOp, os.getenv): a name, not a typo
        if term not in fixed:
            fixed[term] = closest_term(term, lambda first, size: shapes.get((first, size), ())) or term
        return fixed[term]

    def spell(report: str, tokens: list[str]) -> list[str]:
        surfaces: dict[str, set[str]] = {}
        for words in identifiers(report):
            for word in words:
                surfaces.setdefault(stem(word), set()).add(word)
        return [correct(t, surfaces.get(t, set()), report) for t in tokens]

    return spell


def domain_pattern(words: Iterable[str]) -> str:
    """One regex for the domain words, for lower-cased text: each a whole word (a trailing * lets
    the word go on). The docs site's search reads the words with it; `ask` reads them by tokens
    (triage.core.domain), and tests/core/test_domain.py checks that both agree."""
    # the words hold only a-z, 0-9, _, - and spaces (triage.kb.matching checks): nothing to escape
    parts = [w[:-1] + "[a-z0-9_]*" if w.endswith("*") else w for w in sorted(words)]
    return "(?:^|[^a-z0-9_])(?:" + "|".join(parts) + ")(?![a-z0-9_])"


def _signature_data(signature: Signature, seen: tuple[int, int] | None = None) -> list[object]:
    """[pattern, weight, echo, anchors, the pattern with its repeats bounded, its reach]: a match
    contains one of the anchors (lower case; [] = always try), and a long text is searched only in
    windows of `reach` characters around them (triage.core.safe_regex). The weight is the entry's,
    scaled by the signature's reliability where labelled train items matched it (`seen`)."""
    from triage.core.regex_literals import best_requirement
    from triage.core.safe_regex import bounded, reach

    safe = bounded(signature.pattern)
    anchors = list(best_requirement(signature.pattern))
    weight = signature.weight if seen is None else round(signature.weight * reliability(*seen), 4)
    return [signature.pattern, weight, signature.echo, anchors, safe, reach(safe)]


def compact_index(full: dict[str, object]) -> dict[str, object]:
    """The form stored in compiled.json: an inverted index of posting strings that `ask` decodes
    only for the query's own terms. A term's posting is "weight;entry:strength ...|entry.phrasing
    ...": the entries that carry it, and the symptom phrasings it is part of (entry position, then
    the phrasing's number). Phrasings are kept as their weight sums (and their terms, for the docs
    site's snippets). Parsing every entry's term dictionary instead was most of loading."""
    weights = full["weights"]
    strengths = full["strengths"]
    phrases = full["phrases"]
    assert isinstance(weights, dict) and isinstance(strengths, dict) and isinstance(phrases, dict)
    postings: dict[str, list[str]] = {}
    in_phrases: dict[str, list[str]] = {}
    for position, (entry_id, per_term) in enumerate(strengths.items()):
        for term, value in per_term.items():
            postings.setdefault(term, []).append(f"{position}:{value!r}")
        for number, phrase in enumerate(phrases[entry_id]):
            for term in phrase:
                in_phrases.setdefault(term, []).append(f"{position}.{number}")
    return {
        "format": INDEX_FORMAT,
        "entries": list(strengths),
        "postings": {
            t: f"{weights[t]!r};" + " ".join(items) + "|" + " ".join(in_phrases.get(t, ()))
            for t, items in sorted(postings.items())
        },
        "phrase_weights": {k: [round(sum(weights[t] for t in p), 4) for p in v] for k, v in phrases.items()},
        "phrases": {k: [" ".join(p) for p in v] for k, v in phrases.items()},  # for the docs site
        "signatures": full["signatures"],
        "confidence": full["confidence"],
        "domain_words": full.get("domain_words"),
        "variants": full["variants"],
        "shapes": _shapes(postings),
    }


def _shapes(terms: Iterable[str]) -> dict[str, str]:
    """The terms a misspelt word may be corrected to, by first letter and length ("e5": "epoch
    error ..."): `ask` looks at a few of them instead of every term of the index."""
    shapes: dict[str, list[str]] = {}
    for term in sorted(terms):
        if len(term) >= 4 and term.isalpha():
            shapes.setdefault(f"{term[0]}{len(term)}", []).append(term)
    return {shape: " ".join(found) for shape, found in shapes.items()}
