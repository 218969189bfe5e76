"""The data behind the site's client-side search, taken from the `ask` matcher's own index.

The browser ranks exactly as `triage ask` does: the same vocabulary rewrite, stopwords and
stemmer on the query, the same BM25 term weights for each entry (computed here by
`triage.core.matcher.Index`, shipped precomputed), the same fuzzy comparison with the symptom
phrasings, the same signature regexes and the same weights and calibration. `assets/search.js`
holds the query side; a test checks that both agree.

Written as a script (`window.TRIAGE_SEARCH = {...}`) rather than a .json file because browsers
refuse `fetch()` of a local file under file://, and the site must work opened from disk.
"""

from __future__ import annotations

import json

from triage.core import matcher, safe_regex
from triage.core.model import KnowledgeBase
from triage.core.text import STOPWORDS

GLOBAL_NAME = "TRIAGE_SEARCH"


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def search_data(kb: KnowledgeBase) -> dict[str, object]:
    """The data the in-browser search ranks with (the matcher's index)."""
    index = matcher.index_for(kb)
    full = matcher.build_index_data(kb)  # per-entry term weights (compiled.json keeps postings)
    full_docs = full["docs"]
    idf = full["idf"]
    assert isinstance(full_docs, dict) and isinstance(idf, dict)
    terms = sorted(idf)
    number = {t: i for i, t in enumerate(terms)}
    entries = []
    for doc in index.docs:
        entry = doc.entry
        originals = [*entry.symptoms, entry.title]
        if len(doc.phrases) == len(originals):
            normals = list(doc.phrases)
        else:  # the matcher dropped phrasings that normalise to nothing: pair the rest up again
            normals = [" ".join(index.normalizer.tokens(o)) for o in originals]
        phrases = [[n, " ".join(o.split())] for n, o in zip(normals, originals, strict=True) if n]
        entries.append(
            {
                "id": entry.id,
                "url": f"{entry.id}.html",
                "title": _plain(entry.title),
                "summary": _plain(entry.summary),
                "verify": entry.verify.needed,
                "outside": not entry.covered,
                "tf": [[number[t], round(w, 6)] for t, w in sorted(full_docs[entry.id]["tf"].items())],
                "length": round(doc.length, 6),
                "phrases": phrases,
                # [the pattern with its repeats bounded, weight, echo, literal, reach]: searched in
                # the same windows as `ask` searches (triage.core.safe_regex)
                "signatures": [
                    [sig.safe, sig.weight, sig.echo, sig.literal, sig.reach] for sig in doc.signatures
                ],
            }
        )
    variants = {v.lower(): c.lower() for c, words in kb.vocabulary.items() for v in words}
    return {
        "model": {
            "k1": matcher.BM25_K1,
            "b": matcher.BM25_B,
            "wSignature": matcher.W_SIGNATURE,
            "wLexical": matcher.W_LEXICAL,
            "wFuzzy": matcher.W_FUZZY,
            "calSlope": matcher.CAL_SLOPE,
            "calMidpoint": matcher.CAL_MIDPOINT,
            "echoFactor": matcher.ECHO_FACTOR,
            "noMatchBelow": matcher.NO_MATCH_BELOW,
            "maxFuzzyTokens": matcher.MAX_FUZZY_TOKENS,
            "matchChars": safe_regex.MATCH_CHARS,
            "maxWindows": safe_regex.MAX_WINDOWS,
        },
        "stopwords": sorted(STOPWORDS),
        "vocabulary": dict(sorted(variants.items())),
        "terms": terms,
        "idf": [round(idf[t], 6) for t in terms],
        "avgLength": round(index.avg_length, 6),
        "maxIdf": round(index.max_idf, 6),
        "entries": entries,
    }


def search_script(kb: KnowledgeBase) -> str:
    """The search data as a JavaScript file."""
    payload = json.dumps(search_data(kb), ensure_ascii=False, separators=(",", ":"))
    # U+2028/2029 are valid in JSON but end a line in older JavaScript engines.
    payload = payload.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f"window.{GLOBAL_NAME} = {payload};\n"
