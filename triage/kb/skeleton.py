"""`triage kb new`: a complete entry skeleton, every field present, every value a placeholder.

The placeholders carry a marker that `triage kb check` reports (rule `skeleton-filled`), so a
skeleton cannot slip into the knowledge base half-written: the check passes once every marker is
replaced and the entry is placed in the decision graph.
"""

from __future__ import annotations

import re

from triage.core.model import file_prefix, normalize_id
from triage.kb.schema import ENTRY_ID_FORM, ENTRY_ID_PATTERN

MARK = "TODO(kb new)"
URL_MARK = "TODO-kb-new"
PATTERN_MARK = r"TODO\(kb new\)"  # the marker as a regex, in the skeleton's signature
KIND_BY_PREFIX = {
    "D": "diagnosis",
    "MN": "diagnosis",
    "E": "diagnosis",
    "P": "technique",
    "CK": "checklist",
    "X": "out-of-scope",
}


def kind_for(entry_id: str) -> str:
    """The entry kind its id prefix implies."""
    return KIND_BY_PREFIX[entry_id.rstrip("0123456789")]


def slugify(text: str) -> str:
    """'More ranks than GPUs!' -> 'more-ranks-than-gpus' (at most six words)."""
    words = re.findall(r"[a-z0-9]+", text.lower())[:6]
    return "-".join(words) or "new-entry"


def check_id(raw: str) -> str:
    """The normalized id, or ValueError with the form ids take."""
    entry_id = normalize_id(raw)
    if not re.fullmatch(ENTRY_ID_PATTERN, entry_id):
        raise ValueError(f"{raw!r} is not an entry id: use {ENTRY_ID_FORM}")
    return entry_id


def file_name(entry_id: str, slug: str) -> str:
    """The file name of a new entry: its padded id and a slug of its title."""
    return f"{file_prefix(entry_id)}-{slugify(slug)}.yaml"


def render(entry_id: str, section: str, title: str | None = None) -> str:
    """The skeleton's YAML text."""
    kind = kind_for(entry_id)
    heading = title.replace('"', "'") if title else f"{MARK}: one line that says what goes wrong"
    scope = (
        f"{MARK}: what the user sees, and that triage does not cover it (say where to look instead)"
        if kind == "out-of-scope"
        else f"{MARK}: one sentence a user would recognise as their symptom"
    )
    symptoms = "\n".join(
        f'  - "{MARK}: phrasing {n} in the words users type, from a real thread (pasted errors welcome)"'
        for n in range(1, 9)
    )
    return f"""id: {entry_id}
title: "{heading}"
section: {section}
kind: {kind}
summary: "{scope}"
# At least 6 phrasings (8 for new entries), terse to long, collected from real threads.
symptoms:
{symptoms}
# The lines a failing job prints (Python regexes, searched case-insensitively, one line at a time).
# Prefer literal text with \\s+ or short bounded gaps (.{{0,80}}); `signatures: []` if it prints nothing.
signatures:
  - pattern: '{PATTERN_MARK}: the literal text of the line'
    weight: 1.0
    note: "{MARK}: what this line is and who prints it"
    # echo: true   # when the line usually echoes another rank's failure (a watchdog timeout)
    examples:
      - "{MARK}: a real line, copied verbatim from a thread, torch/NCCL source or a reproduction"
root_cause: |
  {MARK}: why it happens (Markdown), in your own words.
fix: |
  {MARK}: the exact commands and code, best option first.

  ```bash
  {MARK}
  ```
verify:
  needed: false          # true when the fix changes batch size, LR, precision, data order/sharding, resume point
  changes: []            # then list them: batch_size, learning_rate, precision, data_order, data_sharding, resume_point, normalization
  why: "{MARK}: what to re-check after the fix, or why nothing needs re-checking"
related: []              # ids of entries worth reading next
references:
  - title: "{MARK}: the public doc or thread this comes from"
    url: https://example.org/{URL_MARK}
confirm: []              # probe facts (facts.yaml) that support the diagnosis: - fact: ..., values: [...]
cases:
  match:
    - "{MARK}: a phrasing NOT in symptoms that must rank this entry first"
    - "{MARK}: another one"
  no_match:
    - "{MARK}: a phrasing of another problem that must not rank this entry first"
    - "{MARK}: another one"
"""
