"""What compiling the matcher's index needs from outside the knowledge's YAML entries.

- The English background: each word's frequency from the `wordfreq` package, a build-time
  dependency only (`ask` reads the weights from compiled.json). Without it every word counts as
  moderately rare, and `triage kb check` reports compiled.json as written differently.
- The confidence model (knowledge/confidence.yaml, written by bench/fit_confidence.py from the
  corpus's train split): when `ask` answers and when it says nothing matches well.
- The domain words (knowledge/domain.yaml, written by hand): a text that holds none of them is
  likely about another domain; a feature of the confidence model.
- The labelled reports (knowledge/reports.yaml, written by the same script from the same train
  split, never from test): real users' descriptions of each entry, compiled into the index as
  further phrasings of its symptoms.
- The signature evidence (knowledge/signature_evidence.yaml, the same script, the same split): how
  many labelled train reports and logs each signature matched, and how many of them were its
  entry's; the index scales its weight by that (triage.core.match_index.reliability).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from triage.core.errors import UserError
from triage.core.matcher import Confidence
from triage.kb.fingerprint import OPTIONAL_FILES

CONFIDENCE_NAME, REPORTS_NAME, DOMAIN_NAME, EVIDENCE_NAME = OPTIONAL_FILES
DOMAIN_WORD = re.compile(r"[a-z0-9][a-z0-9_\- ]{0,39}\*?")
MAX_DOMAIN_WORDS = 1000


def english_zipf() -> Callable[[str], float] | None:
    """A word's (or phrase's) Zipf frequency in English, or None when wordfreq is not installed."""
    try:
        from wordfreq import zipf_frequency
    except ImportError:
        return None
    cache: dict[str, float] = {}

    def lookup(word: str) -> float:
        if word not in cache:
            cache[word] = float(zipf_frequency(word, "en"))
        return cache[word]

    return lookup


def _optional_yaml(path: str) -> object:
    """An optional knowledge file's YAML, or None when the file is absent."""
    import yaml

    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot be read as YAML ({type(exc).__name__})") from None


def read_confidence(root: str | os.PathLike[str]) -> dict[str, float] | None:
    """The fitted confidence model, or None when the knowledge has none (the defaults apply)."""
    path = os.path.join(os.fspath(root), CONFIDENCE_NAME)
    data = _optional_yaml(path)
    if data is None:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    if not isinstance(model, dict) or set(model) != set(Confidence._fields):
        fields = ", ".join(Confidence._fields)
        raise UserError(
            f"{path}: needs a `model:` mapping with exactly {fields} (rerun bench/fit_confidence.py)"
        )
    values: dict[str, float] = {}
    for key in Confidence._fields:
        value = model[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
            raise UserError(f"{path}: model.{key} must be a number, not {value!r}")
        values[key] = float(value)
    if not 0 < values["threshold"] < 1:
        raise UserError(f"{path}: model.threshold must lie between 0 and 1")
    return values


def read_reports(root: str | os.PathLike[str]) -> dict[str, list[str]] | None:
    """Entry id -> the labelled train reports of it, or None when the knowledge has none."""
    path = os.path.join(os.fspath(root), REPORTS_NAME)
    data = _optional_yaml(path)
    if data is None:
        return None
    reports = data.get("reports") if isinstance(data, dict) else None
    if not isinstance(reports, dict) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(t, str) for t in v)
        for k, v in reports.items()
    ):
        raise UserError(f"{path}: needs a `reports:` mapping of entry ids to lists of texts")
    return {k: list(v) for k, v in reports.items()}


def read_signature_evidence(root: str | os.PathLike[str]) -> dict[str, dict[str, tuple[int, int]]] | None:
    """Entry id -> signature pattern -> (labelled train items it matched, how many were the entry's),
    or None when the knowledge has none."""
    path = os.path.join(os.fspath(root), EVIDENCE_NAME)
    data = _optional_yaml(path)
    if data is None:
        return None
    table = data.get("signatures") if isinstance(data, dict) else None
    problem = f"{path}: needs a `signatures:` mapping of entry ids to lists of {{pattern, matched, right}}"
    if not isinstance(table, dict):
        raise UserError(problem)
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for entry_id, rows in table.items():
        if not isinstance(entry_id, str) or not isinstance(rows, list):
            raise UserError(problem)
        for row in rows:
            if not isinstance(row, dict) or set(row) != {"pattern", "matched", "right"}:
                raise UserError(problem)
            pattern, matched, right = row["pattern"], row["matched"], row["right"]
            if not isinstance(pattern, str) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in (matched, right)
            ):
                raise UserError(problem)
            if not 0 <= right <= matched:
                raise UserError(f"{path}: {entry_id} {pattern!r}: right must be between 0 and matched")
            out.setdefault(entry_id, {})[pattern] = (matched, right)
    return out


def read_domain(root: str | os.PathLike[str]) -> list[str] | None:
    """The words that say a text is about training (lower case, a trailing * for a prefix), or None
    when the knowledge has no domain.yaml."""
    path = os.path.join(os.fspath(root), DOMAIN_NAME)
    data = _optional_yaml(path)
    if data is None:
        return None
    words = data.get("words") if isinstance(data, dict) else None
    if not isinstance(words, list) or not words or len(words) > MAX_DOMAIN_WORDS:
        raise UserError(f"{path}: needs a `words:` list of 1 to {MAX_DOMAIN_WORDS} words")
    for word in words:
        if not isinstance(word, str) or not DOMAIN_WORD.fullmatch(word):
            raise UserError(
                f"{path}: {word!r} is not a domain word (lower-case letters, digits, _, - or a space;"
                " at most 40 characters; a trailing * for a prefix)"
            )
    return sorted(set(words))
