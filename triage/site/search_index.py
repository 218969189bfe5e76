"""The data behind the site's client-side search, taken from the `ask` matcher's own index.

The browser ranks exactly as `triage ask` does: the query goes through the same normalising rules
(triage/core/text.py, repeated in `assets/search.js`) and is scored against the same precomputed
index (term weights and per-entry strengths, symptom phrasings, signatures with their literal
anchors) with the same constants and confidence model. A browser test checks that both agree.

Written as a script (`window.TRIAGE_SEARCH = {...}`) rather than a .json file because browsers
refuse `fetch()` of a local file under file://, and the site must work opened from disk.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from triage.core import matcher, safe_regex, text
from triage.core.match_index import domain_pattern
from triage.core.model import KnowledgeBase

GLOBAL_NAME = "TRIAGE_SEARCH"


def _plain(value: str) -> str:
    return " ".join(value.replace("`", "").split())


def search_data(kb: KnowledgeBase) -> dict[str, object]:
    """The data the in-browser search ranks with (the matcher's index and constants)."""
    index = matcher.index_for(kb)
    data = index.data
    all_phrases = data["phrases"]
    all_weights = data["phrase_weights"]
    assert isinstance(all_phrases, Mapping) and isinstance(all_weights, Mapping)
    entries = []
    for entry in index.entries:
        phrases = zip(all_weights[entry.id], all_phrases[entry.id], strict=True)
        originals = [entry.title, *entry.symptoms]
        normals = [" ".join(sorted(set(index.normalizer.tokens(o)))) for o in originals]
        shown = {n: " ".join(o.split()) for n, o in zip(normals, originals, strict=True) if n}
        entries.append(
            {
                "id": entry.id,
                "url": f"{entry.id}.html",
                "title": _plain(entry.title),
                "summary": _plain(entry.summary),
                "verify": entry.verify.needed,
                "outside": not entry.covered,
                # [weight sum, terms, the phrasing as written] for the snippet under a result
                "phrases": [[w, terms, shown.get(terms, "")] for w, terms in phrases],
            }
        )
    signatures = data["signatures"]
    assert isinstance(signatures, Mapping)
    return {
        "model": {
            "wCoverage": matcher.W_COVERAGE,
            "wPhrase": matcher.W_PHRASE,
            "wSignature": matcher.W_SIGNATURE,
            "prior": matcher.PRIOR_WEIGHT,
            "echoFactor": matcher.ECHO_FACTOR,
            "typoDiscount": matcher.TYPO_DISCOUNT,
            "leadTerms": matcher.LEAD_TERMS,
            "leadDecay": matcher.LEAD_DECAY,
            "maxChars": matcher.MAX_QUERY_CHARS,
            "matchChars": safe_regex.MATCH_CHARS,
            "maxWindows": safe_regex.MAX_WINDOWS,
            "windowGap": text.WINDOW_GAP,
            "confidence": index.confidence._asdict(),
            "evidenceFloor": matcher.EVIDENCE_FLOOR,
            "domain": domain_pattern(words) if isinstance(words := data.get("domain_words"), list) else None,
        },
        "stopwords": sorted(text.STOPWORDS),
        "pluralAcronyms": sorted(text.PLURAL_ACRONYMS),
        "units": sorted(text.UNITS | text.NUMBER_WORDS),  # words that are dropped as numbers are
        "numberSuffixes": sorted(text.NUMBER_SUFFIXES),
        "variants": index.normalizer.variant_table(),
        "postings": dict(data["postings"]),  # type: ignore[call-overload]
        "signatures": [signatures[e.id] for e in index.entries],
        "entries": entries,
    }


def search_script(kb: KnowledgeBase) -> str:
    """The search data as a JavaScript file."""
    payload = json.dumps(search_data(kb), ensure_ascii=False, separators=(",", ":"))
    # U+2028/2029 are valid in JSON but end a line in older JavaScript engines.
    payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f"window.{GLOBAL_NAME} = {payload};\n"
