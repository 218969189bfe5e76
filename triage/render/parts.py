"""The parts of an entry's page, in the one order every front end shows them.

`triage show` and `triage ask` (terminal text), the app's result screen, the session report and
the docs site each draw an entry as some of these parts; which ones, and in what order, comes
from `entry_parts`, so the same entry reads the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from triage.core.graph import incoming
from triage.core.model import Entry, KnowledgeBase


class Part(NamedTuple):
    """One titled part of an entry: `key` names it in code, `title` is its heading."""

    key: str
    title: str


PARTS: tuple[Part, ...] = (
    Part("fix", "Fix"),
    Part("verification", "Verification"),
    Part("root_cause", "Root cause"),
    Part("symptoms", "Symptoms"),
    Part("signatures", "Error signatures"),
    Part("confirm", "Probe evidence"),
    Part("graph", "In the decision graph"),
    Part("related", "Related"),
    Part("references", "References"),
)
# Parts every entry has, whatever it holds, so links to `#fix` and the like never break.
ALWAYS = frozenset({"fix", "verification", "root_cause", "symptoms", "signatures"})


def entry_parts(entry: Entry, kb: KnowledgeBase, only: Collection[str] | None = None) -> list[Part]:
    """The parts `entry` has, in the one order; `only` keeps those keys."""
    present = set(ALWAYS)
    if entry.confirm:
        present.add("confirm")
    if incoming(kb.graph).get(entry.id):
        present.add("graph")
    if any(r in kb.entries for r in entry.related):
        present.add("related")
    if entry.references:
        present.add("references")
    return [p for p in PARTS if p.key in present and (only is None or p.key in only)]
