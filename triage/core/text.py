"""Text normalisation shared by the matcher's index, its queries and the docs site's search.

Both sides go through the same steps, so a phrasing and an entry meet on the same terms:

1. What is not evidence goes: URLs, source files and file:line references (`distributed_c10d.py:
   400`, anything under site-packages), bare numbers and their units (apart or glued on: 24GB),
   hex ids and addresses.
2. Identifiers are split into words (camelCase, snake_case, kebab-case) and their joined form is
   kept too: all_reduce, AllReduce, all-reduce and ALLREDUCE all give "allreduce". A brand spelt
   with a two-letter hump (PyTorch, ZeRO, LoRA) stays one word.
3. Words are lower-cased, accents folded and stemmed. Words in other scripts are kept as they are;
   the knowledge is written in English, so they never meet it and count for nothing either way,
   except text in Chinese, Japanese or Korean: it is read as overlapping character pairs, which
   are no terms themselves but let the vocabulary's variants in those languages meet it.
4. Vocabulary variants (knowledge/vocabulary.yaml, and the collective names of COLLECTIVES) are
   rewritten to their canonical term after stemming; the words of a variant may sit up to
   WINDOW_GAP other words apart ("end of the first epoch" meets "end of epoch").
5. Stopwords and numbers, kept until then so that variants can use them, are dropped.

triage/site/assets/search.js repeats these rules for the docs site's search; a browser test holds
the two together.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping

TYPE_CHECKING = False  # mypy reads it as true; importing it from typing would load typing
if TYPE_CHECKING:
    from typing import Any

WINDOW_GAP = 2  # words allowed between the words of a vocabulary variant, in total

# One lexicon for the collective operations: every spelling of a name (all_reduce, allReduce,
# all-reduce, "all reduce") reaches the spaced form by step 2, and that form the joined one.
COLLECTIVES: dict[str, tuple[str, ...]] = {
    "allreduce": ("all reduce",),
    "allgather": ("all gather",),
    "reducescatter": ("reduce scatter",),
    "alltoall": ("all to all",),
    "broadcast": (),
    "barrier": ("monitored barrier",),
}

STOPWORDS = frozenset(  # a word list reads better as text
    """a an the and or but if then else of to in on at by for with from into onto over under about
    as is are was were be been being am do does did doing done have has had having i me my mine we
    our you your it its this that these those there here he she they them their what which who whom
    whose when where why how all any both each few more most other some such no nor not only own same
    so than too very s t can will just don should now would could may might must shall im ive id
    youre dont doesnt didnt cant cannot isnt arent wasnt wont please help hi hello thanks thank anyone
    someone somebody something anything everything get gets got getting use used using uses also
    still even again like want need trying try tried seem seems seemed way one ever really actually
    maybe though however while after before during up down out off much many lot lots know think see
    saw look looks looking run running ran issue problem question complain complains complained
    complaining""".split()  # noqa: SIM905
)

# File name extensions of source code: a chunk ending in one (maybe with :line) names a file.
_SOURCE_EXTENSIONS = frozenset({"py", "pyx", "pyi", "cpp", "cc", "cxx", "cu", "cuh", "hpp", "h", "c", "so"})
_IDENTIFIER = re.compile(r"[^\W_]+(?:[_-]+[^\W_]+)*")
_HUMP = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"  # compiled (by re.sub) when first needed
_SIZE_UNITS = frozenset({"KiB", "MiB", "GiB", "TiB", "PiB"})
# Units that only ever follow a number: no more evidence than the number itself.
UNITS = frozenset({"kib", "mib", "gib", "tib", "kb", "mb", "gb", "tb", "ms", "sec", "secs"})
# ... or are glued to it: 24gb, 500ms, 13b (parameters), 8x (GPUs): a number all the same.
NUMBER_SUFFIXES = UNITS | {"b", "k", "m", "x"}
# Numbers spelled out are numbers too ("a few hundred steps", "eight GPUs"). Not "zero" (ZeRO) and
# not ordinals ("the second node" says multi-node).
NUMBER_WORDS = frozenset(
    """two three four five six seven eight nine ten eleven twelve sixteen twenty thirty forty fifty
    sixty hundred hundreds thousand thousands million millions billion billions dozen dozens""".split()  # noqa: SIM905
)
_HEX_DIGITS = frozenset("0123456789abcdef")
_FRAME = r'File "[^"\n]*", line \d+,?'  # a traceback frame's header: where, not what
_TRIM = "\"'`()[]{}<>,;!?"
# Plain string tests instead of more regexes: compiling a regex costs more than `ask` spends on a
# short query, and these run on every word.


def _is_source(chunk: str) -> bool:
    """A source file, maybe with a directory and :line (`train.py`, `ProcessGroupNCCL.cpp:1169`)."""
    name = chunk
    while True:
        head, colon, line = name.rpartition(":")
        if not colon or not line.isdecimal():
            break
        name = head
    stem, dot, extension = name.rpartition(".")
    return bool(dot and stem) and extension in _SOURCE_EXTENSIONS


def _is_acronym(piece: str) -> bool:
    """GPUs, IDs, MiB: one word, not "GP" + "Us" (camel case is split elsewhere)."""
    letters = piece[:-1]
    return piece in _SIZE_UNITS or (
        piece.endswith("s") and len(letters) >= 2 and all("A" <= c <= "Z" for c in letters)
    )


def _is_stub(hump: str) -> bool:
    """A two-letter hump of a brand's spelling (the "Py" of PyTorch, "Ze" of ZeRO, "Lo" of LoRA):
    the name is one word, not a stub and a rest that mean nothing apart."""
    return len(hump) == 2 and "A" <= hump[0] <= "Z" and "a" <= hump[1] <= "z"


def _is_hex(word: str) -> bool:
    if word.startswith("0x") and len(word) > 2:
        return all(c in _HEX_DIGITS for c in word[2:])
    return len(word) >= 7 and all(c in _HEX_DIGITS for c in word)


def _evidence_chunks(text: str) -> Iterable[str]:
    """Whitespace-separated chunks of `text` that can carry evidence (no URLs or source paths, no
    traceback frame headers but their function names).

    Chunk by chunk rather than with regexes over the whole text: linear whatever the input."""
    if 'File "' in text:
        text = re.sub(_FRAME, " ", text)
    for chunk in text.split():
        core = chunk.strip(_TRIM)
        if "://" in core or core.startswith("www.") or "-packages" in core or _is_source(core):
            continue
        yield core


def _fold(word: str) -> str:
    if word.isascii():
        return word
    import unicodedata  # only for text that is not ASCII

    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def is_number(word: str) -> bool:
    """Bare numbers, hex ids and words made mostly of digits (versions, sizes, GPU models)."""
    if word.isdigit() or _is_hex(word):
        return True
    digits = sum(c.isdigit() for c in word)
    return digits * 2 > len(word)


def identifiers(text: str) -> Iterator[list[str]]:
    """Each identifier of the evidence in `text` as its lower-case words (one word for a plain word)."""
    for chunk in _evidence_chunks(text):
        for identifier in _IDENTIFIER.findall(chunk):
            parts: list[str] = []
            for piece in identifier.replace("-", "_").split("_"):
                if not piece:
                    continue
                # A number has no humps either: _HUMP (compiled on first use) is not needed for it.
                plain = piece.isupper() or piece.islower() or piece.isdecimal()
                if plain or not piece.isascii() or _is_acronym(piece):
                    parts.append(piece)
                else:
                    humps = re.sub(_HUMP, " ", piece).split()
                    parts.extend([piece] if any(_is_stub(h) for h in humps) else humps)
            yield [_fold(p.lower()) for p in parts if p]


def raw_words(text: str) -> list[str]:
    """Lower-case words in reading order; an identifier gives its parts, then its joined form
    (fine-tuning -> fine, tuning, finetuning), so that it meets the same words written together."""
    out: list[str] = []
    for words in identifiers(text):
        out.extend(words)
        if len(words) > 1:
            out.append("".join(words))
    return out


PLURAL_ACRONYMS = frozenset({"gpus", "cpus", "tpus", "npus"})


def stem(word: str) -> str:
    """A small suffix stripper: consistent on both sides matters more than linguistic accuracy."""
    if len(word) <= 3 or not word.isalpha() or not word.isascii():
        return word
    if word.endswith("sses"):
        word = word[:-2]
    elif word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("ches", "shes", "xes", "zes")):
        word = word[:-2]
    elif word.endswith("s") and (not word.endswith(("ss", "us", "is")) or word in PLURAL_ACRONYMS):
        word = word[:-1]
    for suffix, keep in (("ing", 4), ("ed", 3)):
        stem_part = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem_part) >= keep and any(v in stem_part for v in "aeiouy"):
            word = stem_part
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # stopped -> stop, running -> run
            break
    if word.endswith(("isation", "ization")):
        word = word[:-5]
    elif word.endswith("ly") and len(word) > 5:
        word = word[:-2]
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    if word.endswith("is") and len(word) > 6:
        word = word[:-1] + "z"  # initialise / initialize
    return word


def _with_unit(word: str) -> bool:
    """A number with its unit glued on (24gb, 500ms, 13b)."""
    number = word.rstrip("abcdefghijklmnopqrstuvwxyz")
    return bool(number) and number.isdecimal() and word[len(number) :] in NUMBER_SUFFIXES


def _term(word: str) -> tuple[str, bool]:
    """(term, keep): stopwords and numbers stay in the sequence for variants, then go."""
    if word in STOPWORDS:
        return word, False
    if len(word) < 2 or word in UNITS or word in NUMBER_WORDS or is_number(word) or _with_unit(word):
        return word, False
    return stem(word), True


def _is_cjk(c: str) -> bool:
    """Han, kana or Hangul: scripts written without spaces between words (Hangul between phrases)."""
    return (
        "\u4e00" <= c <= "\u9fff"
        or "\u3040" <= c <= "\u30ff"
        or "\uac00" <= c <= "\ud7af"
        or "\u3400" <= c <= "\u4dbf"
        or "\uf900" <= c <= "\ufaff"
    )


def _cjk_terms(word: str) -> list[tuple[str, bool]]:
    """A word holding Chinese, Japanese or Korean: its runs in those scripts as overlapping
    character pairs (训练卡住 -> 训练, 练卡, 卡住), the usual way to find words in text without
    spaces, and its other runs as words. The pairs are not terms themselves (the knowledge is in
    English): only a vocabulary variant written in those scripts turns them into one."""
    out: list[tuple[str, bool]] = []
    for is_cjk, run in itertools.groupby(word, _is_cjk):
        chars = "".join(run)
        if not is_cjk:
            out.append(_term(chars))
        elif len(chars) == 1:
            out.append((chars, False))
        else:
            out.extend((chars[i : i + 2], False) for i in range(len(chars) - 1))
    return out


def _overlaps(pair: str, following: str) -> bool:
    """Two character pairs of one run (卡住, 住了): a variant that ends on the first used its
    second character, so the pair after it is no word."""
    return len(pair) == 2 == len(following) and pair[1] == following[0] and _is_cjk(pair[1])


def sequence(text: str) -> list[tuple[str, bool]]:
    """(term, keep) for every word of `text`: steps 1 to 3, before the vocabulary."""
    out: list[tuple[str, bool]] = []
    for word in raw_words(text):
        if word.isascii() or not any(_is_cjk(c) for c in word):
            out.append(_term(word))
        else:
            out.extend(_cjk_terms(word))
    return out


VariantTable = Mapping[str, list[list["Any"]]]


# A vocabulary variant: its terms, which of them are content words (only those may follow a gap),
# and the canonical term it stands for. A plain tuple: `ask` builds a thousand of them.
Variant = tuple[tuple[str, ...], tuple[bool, ...], str]


class Normalizer:
    """Turns text into the terms the matcher compares: the steps of the module docstring."""

    def __init__(self, vocabulary: Mapping[str, Iterable[str]], table: VariantTable | None = None) -> None:
        """From the vocabulary, or from `table` (its variants as `variant_table` lists them: the
        compiled knowledge stores it, so that `ask` does not tokenise every variant again)."""
        self._variants: dict[str, list[Variant]] = {}
        if table is not None:
            for first, items in table.items():
                self._variants[first] = [(tuple(t), tuple(c), canonical) for t, c, canonical in items]
            return
        merged: dict[str, list[str]] = {k: list(v) for k, v in COLLECTIVES.items()}
        for canonical, words in vocabulary.items():
            merged.setdefault(canonical, []).extend(words)
        for canonical, words in merged.items():
            target = stem(canonical.lower())
            for word in words:
                seq = sequence(word)
                key = tuple(t for t, _ in seq)
                if key and key != (target,):
                    variant = (key, tuple(k for _, k in seq), target)
                    self._variants.setdefault(key[0], []).append(variant)
        for options in self._variants.values():
            options.sort(key=lambda item: -len(item[0]))

    def variant_table(self) -> VariantTable:
        """The variants as JSON-ready data: first term -> [[terms], [content flags], canonical]."""
        return {
            first: [[list(terms), list(content), canonical] for terms, content, canonical in items]
            for first, items in self._variants.items()
        }

    @property
    def variants(self) -> dict[str, list[Variant]]:
        """First term -> the variants that start with it, longest first (for search.js)."""
        return self._variants

    @staticmethod
    def _match(seq: list[tuple[str, bool]], start: int, variant: Variant) -> list[int] | None:
        """Positions of the variant's terms from `start` on, in order, with at most WINDOW_GAP other
        words between; only a content word may follow a gap ("rank 0" needs the 0 right after)."""
        positions = [start]
        gaps = 0
        at = start + 1
        terms, flags, _ = variant
        for word, content in zip(terms[1:], flags[1:], strict=True):
            while content and at < len(seq) and seq[at][0] != word and gaps < WINDOW_GAP:
                at += 1
                gaps += 1
            if at >= len(seq) or seq[at][0] != word:
                return None
            positions.append(at)
            at += 1
        return positions

    def tokens(self, text: str) -> list[str]:
        """The terms of `text`, in order (a term may repeat)."""
        seq = sequence(text)
        out: list[str] = []
        i = 0
        while i < len(seq):
            term, keep = seq[i]
            for variant in self._variants.get(term, ()):
                positions = self._match(seq, i, variant) if len(variant[0]) > 1 else [i]
                if positions is not None:
                    out.append(variant[2])
                    inside = set(positions)
                    out.extend(
                        t for j, (t, k) in enumerate(seq[i : positions[-1] + 1], i) if k and j not in inside
                    )
                    i = positions[-1] + 1
                    if i < len(seq) and _overlaps(seq[i - 1][0], seq[i][0]):
                        i += 1
                    break
            else:
                if keep:
                    out.append(term)
                i += 1
        return out


PAIR = "+"


def pairs(tokens: list[str]) -> list[str]:
    """The terms and every pair of adjacent terms ("device+ordinal"): word order is evidence too."""
    return [*tokens, *(f"{a}{PAIR}{b}" for a, b in itertools.pairwise(tokens) if a != b)]


def foreign_share(text: str) -> float:
    """The share of the text's words written in a script other than Latin (0 for none)."""
    words = [w for w in raw_words(text) if not is_number(w)]
    if not words:
        return 0.0
    return sum(1 for w in words if not w.isascii()) / len(words)


def collective_of(name: str) -> str | None:
    """The canonical collective a function or op name stands for (all_gather_into_tensor ->
    allgather, ALLREDUCE -> allreduce, monitored_barrier -> barrier), or None."""
    flat = "".join(c for c in name.lower() if c.isalnum())
    flat = flat.removeprefix("nccl").removeprefix("c10d")
    for canonical in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast"):
        if flat.startswith(canonical):
            return canonical
    if flat in ("barrier", "monitoredbarrier"):
        return "barrier"
    return None
