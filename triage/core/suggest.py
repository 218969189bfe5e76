"""What the user's own words point at: an option of the current question, or entries elsewhere.

The search box and free-text answers share this. The ranking itself is the matcher's (the same as
`triage ask`); this module only decides the order in which the two kinds of hit are offered, so
that Enter does the obvious thing: at the start, a strong entry match opens that entry; mid-walk,
words that fit an option answer the question, and words that fit no option but describe another
problem name the entries triage now suspects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from triage.core.model import KnowledgeBase, QuestionNode

if TYPE_CHECKING:
    from triage.core.separate import Question

# rank_options scores below this are not offered as an answer: the words probably mean something else.
OPTION_MIN = 0.6
MAX_OPTIONS = 2
MAX_ENTRIES = 5


@dataclass(frozen=True)
class Suggestion:
    """One row of suggestions: an option of the question at hand, or an entry to jump to."""

    kind: Literal["option", "entry"]
    label: str
    score: float
    option: int | None = None  # 0-based index into the question's options
    entry_id: str | None = None
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class Suggestions:
    """The ranked suggestions for some words, and the matcher's verdict."""

    items: tuple[Suggestion, ...]
    verdict: str  # the matcher's verdict on the entries: match, no_match or out_of_scope
    different_symptom: bool  # mid-walk, the words fit no option but do describe an entry
    # The graph's question that tells the two best entries apart when they are close (for the app
    # to ask); None when one entry is clearly ahead.
    question: Question | None = None

    @property
    def entries(self) -> tuple[Suggestion, ...]:
        return tuple(item for item in self.items if item.kind == "entry")

    @property
    def first(self) -> Suggestion | None:
        return self.items[0] if self.items else None


NOTHING = Suggestions((), "no_match", False)


def suggest(kb: KnowledgeBase, node: QuestionNode | None, text: str, *, at_start: bool) -> Suggestions:
    """Rank the question's options and the knowledge base's entries for `text`, best offer first."""
    if not text.strip():
        return NOTHING
    from triage.core.matcher import rank

    match = rank(kb, text, top=MAX_ENTRIES)
    options: list[Suggestion] = []
    if node is not None:
        for index, score in rank_options(node, text, kb)[:MAX_OPTIONS]:
            if score >= OPTION_MIN:
                options.append(Suggestion("option", node.options[index].label, score, option=index))
    entries = [
        Suggestion("entry", hit.entry.title, hit.score, entry_id=hit.entry.id, reasons=hit.reasons)
        for hit in match.hits
        if match.evidence  # a text that names nothing gets no guesses (see matcher.EVIDENCE_FLOOR)
    ]
    strong = match.verdict in ("match", "out_of_scope") and bool(entries)
    # At the start the box is a search box: a strong entry match comes first, so Enter opens it.
    items = [*entries, *options] if (at_start and strong) or not options else [*options, *entries]
    return Suggestions(
        tuple(items),
        match.verdict,
        different_symptom=strong and not options and not at_start,
        question=match.question,
    )


@dataclass(frozen=True)
class Reply:
    """What to do with the user's own words, and what to tell them.

    `action`: "answer" the question with option `option` (0-based), "open" entry `entry_id`, name
    the `suspects` (the words describe another problem), or "none" (nothing fits)."""

    action: Literal["answer", "open", "suspect", "none"]
    message: str = ""
    option: int | None = None
    entry_id: str | None = None
    suspects: tuple[Suggestion, ...] = ()


def reply(
    found: Suggestions,
    text: str,
    *,
    chosen: Suggestion | None,
    explicit: bool,
    mid_walk: bool,
    can_answer: bool,
) -> Reply:
    """The one policy for free text, in the app and in `triage walk`.

    `chosen` is the row the user took (the best one unless they picked another; `explicit` when
    they did). A strong entry match opens that entry at the start of a walk or when picked; mid-walk,
    words that fit an option answer the question, and words that fit no option but describe another
    problem name the suspects, so one stray sentence does not throw away the walk."""
    weak = found.verdict == "no_match" and not explicit
    question = found.question
    if weak and question is not None and (chosen is None or chosen.kind == "entry"):
        # Not sure, but two candidates and the graph's question between them beat "no match":
        # the user answers it in their head and jumps (j) to the entry that answer leads to.
        by_id = {e.entry_id: e for e in found.entries}
        suspects = tuple(by_id[entry_id] for _, entry_id in question.options if entry_id in by_id)
        answers = "".join(f"\n  “{label}” → {entry_id}" for label, entry_id in question.options)
        ids = " or ".join(entry_id for _, entry_id in question.options)
        message = (
            f"Not sure about “{text}”: {ids}. The question that separates them: {question.prompt}{answers}"
        )
        return Reply("suspect", message, suspects=suspects)
    if chosen is None or (chosen.kind == "entry" and weak):
        closest = f" The closest entry is {chosen.entry_id}, but it is a weak match." if chosen else ""
        message = f"I could not match “{text}” to an answer or an entry.{closest} Pick an answer, or try other words."
        return Reply("none", message)
    if chosen.kind == "option" and can_answer and chosen.option is not None:
        return Reply("answer", f"Taking that as: {chosen.label}", option=chosen.option)
    if chosen.entry_id is not None and (explicit or not mid_walk):
        return Reply("open", f"Opened from the search “{text}”.", entry_id=chosen.entry_id)
    suspects = found.entries[:3]
    names = "".join(f"\n  {e.entry_id} ({round(e.score * 100)}%) {e.label}" for e in suspects)
    message = (
        f"“{text}” does not fit this question; it sounds like a different problem. I now suspect:{names}"
    )
    return Reply("suspect", message, suspects=suspects)


def rank_options(node: QuestionNode, text: str, kb: KnowledgeBase | None = None) -> list[tuple[int, float]]:
    """How well free text answers each option of a question: (option index, 0..1), best first.

    For the option's label and each of its keywords: the weighted overlap (Dice) with the text's
    terms, or, when one holds all of the other (the text says a whole keyword, or a short answer
    is part of a label), that containment, squared so that half counts for a quarter. With the knowledge base, its vocabulary and term weights apply
    ("frozen" meets "hangs")."""
    from triage.core.matcher import index_for  # the matcher (and its index) only when words are ranked
    from triage.core.text import Normalizer

    index = index_for(kb) if kb is not None else None
    normalizer = index.normalizer if index is not None else Normalizer({})

    def weight(term: str) -> float:
        posting = index.posting(term) if index is not None else None
        return posting[0] if posting is not None else 0.5

    query = {t: weight(t) for t in normalizer.tokens(text)}
    total = sum(query.values())
    scored = []
    for i, option in enumerate(node.options):
        best = 0.0
        for candidate in (option.label, *option.keywords):
            words = {t: weight(t) for t in normalizer.tokens(candidate)}
            common = sum(w for t, w in words.items() if t in query)
            if common:
                size = sum(words.values())
                contained = max(common / size, common / total) ** 2
                best = max(best, 2 * common / (total + size), contained)
        scored.append((i, best))
    scored.sort(key=lambda pair: -pair[1])
    return scored
