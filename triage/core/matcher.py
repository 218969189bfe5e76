"""Ranking entries for free text or pasted error output (`triage ask`, the TUI, `triage log`'s fallback).

Three signals per entry, from the compiled index (triage.core.match_index):
- signatures: an entry's regexes found in the text (pasted errors are the strongest evidence); a
  regex is compiled only when the literal text every match must contain is in the query, and its
  repeats are bounded and a long text searched in windows around that literal (safe_regex);
- coverage: the weight of the query's terms that the entry carries, over the weight of all the
  query's terms the knowledge knows (plus a prior, so two vague words cannot explain everything);
  a word the knowledge has never seen is neutral, neither for nor against;
- phrasing: the weighted overlap (Dice, symmetric) between the query and the closest symptom
  phrasing, so a short symptom inside a long query is not a perfect match.
They add up to a raw score. Whether to answer is a confidence model fitted on the corpus's train
split (bench/fit_confidence.py): the probability that the best entry is right, from its evidence
from words, its lead in words over every other entry, the strength of its matched signature, how
many of the query's words the knowledge knows, what share it has never seen, and whether it holds
a word of the domain at all (knowledge/domain.yaml). A signature can put
an entry first although the report's words point to another (a segfault line quoted in a feature
request about logging, "Connection reset by peer" in an ssh question): its lead in words is then
negative, and the confidence says so, where a lead in raw score would read the signature as a
wide margin. Under the model's threshold the answer
is "no entry matches this well". When the two best entries are close, the decision graph's question
that separates them comes with the answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

from triage.core.boilerplate import drop_boilerplate
from triage.core.model import Entry, KnowledgeBase
from triage.core.text import PAIR, Normalizer, foreign_share, pairs

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import Literal, NamedTuple

    from triage.core.domain import DomainWords
    from triage.core.separate import Question

    Verdict = Literal["match", "no_match", "out_of_scope"]
else:
    from triage.core.records import NamedTuple

INDEX_FORMAT = 9  # the shape of the compiled index (triage.core.match_index writes it)

W_COVERAGE = 1.0
W_PHRASE = 0.5
W_SIGNATURE = 1.5
TITLE_FACTOR = 2.0  # a report's first line (its title) weighs this much more than its body
TITLE_CHARS = 200  # a longer first line is pasted output, not a title
PRIOR_WEIGHT = 0.6  # query weight nobody explains: vague or short text cannot reach full coverage
ECHO_FACTOR = 0.6
TYPO_DISCOUNT = 0.8
LEAD_TERMS = 20
LEAD_DECAY = 0.5
CLOSE_RATIO = 0.85  # the runner-up within this share of the best raw score: ask what separates them
# Below this probability the best entry is a guess, not a candidate: a text like "hi, can you help
# me" holds no word of any entry, and "it does not work" one common word, so neither a ranking nor a
# question is worth showing. (A refit of the confidence model moves probabilities a little: the
# content-free texts of eval/abstain/ sit at 0.03-0.07 with no word at all, about 0.12 with one.)
EVIDENCE_FLOOR = 0.12
# Without an answer, the question that separates the two best entries is still worth asking when
# the text is about this domain and has some weight: on the train reports `ask` abstains on (5-fold
# CV), the right entry is one of those two in 80 % of them, and 94 % reach this floor; of the
# must-abstain inputs (other domains, vague complaints), 18 % do.
UNSURE_FLOOR = 0.3
MAX_QUERY_CHARS = 1_000_000
FOREIGN_NOTE = 0.3


class Confidence(NamedTuple):
    """A logistic model of "the best entry is right" (fitted on train by bench/fit_confidence.py):
    from the entry's word evidence (coverage and phrasing), its lead in word evidence over every
    other entry (negative when a signature put it ahead of what the words say), the strength of its
    matched error signature (0 when none matched), how many of the
    query's words the knowledge knows (log(1 + n): a long real report says more than three words
    that happen to be ours), the share of its words the knowledge has never seen (users' own
    reports are compiled in, so a text mostly about other things is likely about another domain)
    and whether it holds any of the domain words (knowledge/domain.yaml: "Connection reset by
    peer" from ssh says nothing of torch). Words the knowledge does not know never change the
    ranking, only this confidence."""

    bias: float = -3.0
    score: float = 4.0
    lead: float = 3.0
    signature: float = 2.0
    known: float = 0.0
    unknown: float = 0.0
    domain: float = 0.0
    threshold: float = 0.5

    def probability(
        self,
        score: float,
        lead: float,
        signature: float,
        known: int = 0,
        unknown: int = 0,
        domain: bool = False,
    ) -> float:
        z = self.bias + self.score * score + self.lead * lead + self.signature * signature
        z += self.known * math.log1p(known) + self.unknown * unknown / max(known + unknown, 1)
        z += self.domain * domain
        return 1 / (1 + math.exp(-max(-40.0, min(40.0, z))))


class Hit(NamedTuple):
    """An entry ranked for a query: its probability of being right, why, and its evidence."""

    entry: Entry
    score: float  # the probability that this entry is the right one (rounded to 3 places)
    reasons: tuple[str, ...] = ()
    raw: float = 0.0  # the unrounded evidence the ranking uses
    signature: float = 0.0  # the strength of the entry's matched error signatures (0 = none)
    lead: float = 0.0  # its word evidence less the most any other entry has (the confidence's `lead`)

    @property
    def words(self) -> float:
        """The evidence from words alone (coverage and phrasing), without the signatures'."""
        return word_evidence(self.raw, self.signature)


def word_evidence(raw: float, signature: float) -> float:
    """An entry's raw score less what its matched signatures added: what the words alone say."""
    return raw - W_SIGNATURE * signature


class Match(NamedTuple):
    """A query's verdict, its ranked hits and, when the best two are close, what separates them."""

    query: str
    verdict: Verdict
    hits: tuple[Hit, ...]
    question: Question | None = None  # what separates the two best entries, when they are close

    @property
    def best(self) -> Hit | None:
        return self.hits[0] if self.hits else None

    @property
    def evidence(self) -> bool:
        """Whether the text points at any entry at all: some word or signature of it (raw evidence)
        and a probability of at least EVIDENCE_FLOOR."""
        return bool(self.hits) and self.hits[0].raw > 0 and self.hits[0].score >= EVIDENCE_FLOOR


class Posting(NamedTuple):
    """What the index knows of one term."""

    weight: float
    entries: list[tuple[int, float]]  # (entry position, how strongly the entry carries the term)
    phrasings: list[tuple[int, int]]  # (entry position, symptom phrasing number) that contain it


class _Signature(NamedTuple):
    pattern: str
    weight: float
    echo: bool
    anchors: tuple[str, ...]  # a match contains one of these (lower case); () = always try
    safe: str  # the pattern with its repeats bounded (safe_regex.bounded): what is searched
    reach: int  # how far a match extends around an anchor (the windows of a long text)


class Index:
    """Everything about the knowledge base that does not depend on the query."""

    def __init__(self, kb: KnowledgeBase) -> None:
        self.kb = kb
        data = kb.match_index
        if data is None or data.get("format") != INDEX_FORMAT:
            from triage.core.match_index import build_index_data, compact_index

            data = compact_index(build_index_data(kb))
        variants = data["variants"]
        assert isinstance(variants, Mapping)
        self.normalizer = Normalizer(kb.vocabulary, variants)
        self.data = data
        ids = data["entries"]
        assert isinstance(ids, list)
        self.ids: list[str] = ids  # entry ids in index order (their Entry is decoded only for hits)
        self._postings: Mapping[str, str] = data["postings"]  # type: ignore[assignment]
        self._decoded: dict[str, Posting | None] = {}
        raw_weights = data["phrase_weights"]
        raw_signatures = data["signatures"]
        assert isinstance(raw_weights, Mapping) and isinstance(raw_signatures, Mapping)
        self.phrase_weights: list[list[float]] = [raw_weights[i] for i in ids]
        self.signatures = [
            [_Signature(p, w, e, tuple(a), safe, span) for p, w, e, a, safe, span in raw_signatures[i]]
            for i in ids
        ]
        conf = data.get("confidence")
        self.confidence = Confidence(**conf) if isinstance(conf, dict) else Confidence()
        words = data.get("domain_words")
        self._domain_words = list(words) if isinstance(words, list) else []
        self._domain: DomainWords | None = None
        self._regex: dict[str, re.Pattern[str] | None] = {}
        self._data = data

    @property
    def entries(self) -> list[Entry]:
        """Every entry, in index order."""
        return [self.kb.entries[i] for i in self.ids]

    def posting(self, term: str) -> Posting | None:
        """A term's weight, the entries that carry it with their strengths, and the symptom
        phrasings it is part of; None when no entry has it."""
        if term not in self._decoded:
            raw = self._postings.get(term)
            if raw is None:
                self._decoded[term] = None
            else:
                weight, _, rest = raw.partition(";")
                items, _, phrasings = rest.partition("|")
                pairs = [item.split(":") for item in items.split(" ")]
                places = [item.split(".") for item in phrasings.split(" ")] if phrasings else []
                self._decoded[term] = Posting(
                    float(weight),
                    [(int(d), float(s)) for d, s in pairs],
                    [(int(d), int(k)) for d, k in places],
                )
        return self._decoded[term]

    def correct(self, term: str) -> str | None:
        """The knowledge's term a misspelt word most likely means (one edit, two for long words)."""
        if len(term) < 5 or not term.isalpha() or not term.isascii():
            return None
        shapes = self._data["shapes"]  # decoded only when a word needs correcting
        assert isinstance(shapes, Mapping)
        return closest_term(term, lambda first, size: shapes.get(f"{first}{size}", "").split())

    def in_domain(self, lowered: str) -> bool:
        """Whether a (lower-cased) text holds one of the domain words (knowledge/domain.yaml)."""
        if not self._domain_words:
            return False
        if self._domain is None:
            from triage.core.domain import DomainWords

            self._domain = DomainWords(self._domain_words)
        return self._domain.holds(lowered)

    def regex(self, pattern: str) -> re.Pattern[str] | None:
        if pattern not in self._regex:
            try:
                self._regex[pattern] = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
            except re.error:
                self._regex[pattern] = None
        return self._regex[pattern]


def closest_term(term: str, shaped: Callable[[str, int], Iterable[str]]) -> str | None:
    """The known term within one edit of `term` (two for long words), nearest first, then
    alphabetical; `shaped(first letter, length)` gives the known terms of that shape."""
    limit = 1 if len(term) < 8 else 2
    best: tuple[int, str] | None = None
    for size in range(len(term) - limit, len(term) + limit + 1):
        for known in shaped(term[0], size):
            distance = _edit_distance(term, known, limit)
            if distance <= limit and (best is None or (distance, known) < best):
                best = (distance, known)
    return best[1] if best else None


def _edit_distance(a: str, b: str, limit: int) -> int:
    """Damerau-Levenshtein (adjacent transpositions), giving up past `limit`."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                current[j] = min(current[j], previous2[j - 2] + 1)
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return previous[-1]


_INDEXES: dict[int, Index] = {}


def index_for(kb: KnowledgeBase) -> Index:
    """The matcher's index for a knowledge base (built once, then cached)."""
    cached = _INDEXES.get(id(kb))
    if cached is None or cached.kb is not kb:
        cached = Index(kb)
        _INDEXES[id(kb)] = cached
    return cached


def _lead_tokens(index: Index, text: str) -> tuple[list[str], list[float]]:
    """The query's terms, each with how much its line counts: a report of several lines leads with
    its title, which says what the report is about in the poster's fewest words (TITLE_FACTOR); the
    body's terms count once. A first line longer than TITLE_CHARS is pasted output, not a title.
    The docs site's search box holds one line, so search.js has no title to weigh."""
    head, newline, body = text.lstrip().partition("\n")
    if not newline or not body.strip() or len(head) > TITLE_CHARS:
        tokens = index.normalizer.tokens(text)
        return tokens, [1.0] * len(tokens)
    title = index.normalizer.tokens(head)
    rest = index.normalizer.tokens(body)
    return [*title, *rest], [TITLE_FACTOR] * len(title) + [1.0] * len(rest)


def query_terms(index: Index, text: str) -> tuple[dict[str, float], int]:
    """The query's terms the knowledge knows, with their weights, and how many words it did not.

    Reports lead with what matters (a title, the error line): a title's terms count TITLE_FACTOR
    times, and terms first seen past the first LEAD_TERMS count for less, the further the less."""
    terms: dict[str, float] = {}
    unknown = 0
    tokens, factors = _lead_tokens(index, drop_boilerplate(text))
    first: dict[str, int] = {}
    boost: dict[str, float] = {}
    for position, term in enumerate(pairs(tokens)):
        at = position if position < len(tokens) else position - len(tokens)
        first.setdefault(term, at)
        boost[term] = max(boost.get(term, 0.0), factors[at])
    for term, at in first.items():
        lead = 1.0 if at < LEAD_TERMS else (LEAD_TERMS / (at + 1)) ** LEAD_DECAY
        lead *= boost[term]
        posting = index.posting(term)
        if posting is not None:
            terms[term] = max(terms.get(term, 0.0), posting[0] * lead)
            continue
        fixed = index.correct(term) if PAIR not in term else None
        fixed_posting = index.posting(fixed) if fixed else None
        if fixed and fixed_posting is not None:
            terms[fixed] = max(terms.get(fixed, 0.0), fixed_posting[0] * TYPO_DISCOUNT * lead)
        elif PAIR not in term:
            unknown += 1
    return terms, unknown


def _signature_score(index: Index, position: int, text: str, lowered: str) -> tuple[float, list[str]]:
    best = 0.0
    found = 0
    reasons = []
    for sig in index.signatures[position]:
        if sig.anchors and not any(a in lowered for a in sig.anchors):
            continue
        regex = index.regex(sig.safe)
        if regex is None:
            continue
        from triage.core.safe_regex import windows  # only once a signature's literal is in the text

        parts = windows(text, lowered, sig.anchors, sig.reach)
        m = next((hit for part in parts if (hit := regex.search(part)) is not None), None)
        if m is None:
            continue
        found += 1
        best = max(best, sig.weight * (ECHO_FACTOR if sig.echo else 1.0))
        reasons.append(f"error text matches {sig.pattern!r}: {m.group(0)[:80]!r}")
    if found > 1:
        best = min(1.0, best + 0.1 * (found - 1))
    return best, reasons


def _scores(
    index: Index, terms: dict[str, float]
) -> tuple[list[float], list[float], list[list[tuple[float, str]]]]:
    """Coverage and phrasing per entry, and the terms each entry explains with their weight."""
    size = len(index.ids)
    explained = [0.0] * size
    shared: list[list[tuple[float, str]]] = [[] for _ in range(size)]
    common: dict[tuple[int, int], float] = {}
    ordered = sorted(terms.items())  # one summation order, which the docs site's search repeats
    for term, weight in ordered:
        posting = index.posting(term)
        assert posting is not None
        for position, strength in posting.entries:
            explained[position] += weight * strength
            shared[position].append((weight * strength, term))
        for place in posting.phrasings:
            common[place] = common.get(place, 0.0) + weight
    total = sum(w for _, w in ordered)
    coverage = [e / (total + PRIOR_WEIGHT) for e in explained]
    phrase = [0.0] * size
    for (position, number), weight in common.items():
        phrase[position] = max(
            phrase[position], 2 * weight / (total + index.phrase_weights[position][number])
        )
    names = shared
    return coverage, phrase, names


def rank(kb: KnowledgeBase, text: str, top: int = 5) -> Match:
    """Entries best first with their probabilities; the verdict says whether any matches well."""
    index = index_for(kb)
    text = text[:MAX_QUERY_CHARS]
    terms, unknown = query_terms(index, text)
    known = sum(1 for term in terms if PAIR not in term)
    coverage, phrase, names = _scores(index, terms)
    lowered = text.lower()
    scored = []
    for position, entry_id in enumerate(index.ids):
        sig, reasons = _signature_score(index, position, text, lowered)
        raw = W_COVERAGE * coverage[position] + W_PHRASE * phrase[position] + W_SIGNATURE * sig
        scored.append((raw, sig, entry_id, reasons, position))
    scored.sort(key=lambda item: (-item[0], item[2]))  # ties: by id, on unrounded scores
    conf = index.confidence
    best_raw = scored[0][0] if scored else 0.0
    second_raw = scored[1][0] if len(scored) > 1 else 0.0
    by_words = [*sorted((word_evidence(raw, sig) for raw, sig, *_ in scored), reverse=True)[:2], 0.0, 0.0]
    hits = []
    probability = 0.0
    domain = index.in_domain(lowered)
    for i, (raw, sig, entry_id, reasons, position) in enumerate(scored[: max(top, 1)]):
        words = word_evidence(raw, sig)
        lead = words - (by_words[1] if words >= by_words[0] else by_words[0])  # over every other entry
        if i > 0:  # ... and an entry ranked below the best is behind it, whatever its words say
            lead = min(lead, raw - best_raw)
        p = conf.probability(words, lead, sig, known, unknown, domain)
        probability = p if i == 0 else probability
        if names[position]:
            heaviest = [t for _, t in sorted(names[position], reverse=True)[:5]]
            reasons.append(f"words that point here: {', '.join(heaviest)}")
        hits.append(Hit(kb.entries[entry_id], round(p, 3), tuple(reasons), raw, sig, lead))
    if foreign_share(text) >= FOREIGN_NOTE and hits:
        note = (
            "much of this text is in a language the knowledge is not written in: only its English"
            " words and the few of its own that the vocabulary knows were matched"
        )
        hits[0] = hits[0]._replace(reasons=(*hits[0].reasons, note))
    best = hits[0] if hits else None
    if best is None or probability < conf.threshold:
        verdict: Verdict = "no_match"
    elif not best.entry.covered:
        verdict = "out_of_scope"
    else:
        verdict = "match"
    question = None
    # Close answers, or no answer at all: either way the user's quickest next step is the one
    # question that tells the two best candidates apart.
    if verdict == "no_match":
        wanted = probability >= UNSURE_FLOOR and domain
    else:
        wanted = second_raw >= CLOSE_RATIO * best_raw and probability >= EVIDENCE_FLOOR
    if len(scored) > 1 and best_raw > 0 and second_raw > 0 and wanted:
        from triage.core.separate import separating_question

        question = separating_question(kb, scored[0][2], scored[1][2], text)
    return Match(text, verdict, tuple(hits), question)
