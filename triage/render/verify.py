"""Whether a fix changes the experiment, in the one wording every front end uses.

The terminal banner, the report, the app's result screen and the site all say it with these
functions, so a user who meets the warning in two places reads the same words.
"""

from __future__ import annotations

from triage.core.model import Entry

VERIFY_BADGE = "needs experiment verification"  # the short label beside an entry
NO_VERIFY_LABEL = "no experiment verification needed"

CHANGE_WORDS = {
    "batch_size": "the batch size",
    "learning_rate": "the learning rate",
    "precision": "the numeric precision",
    "data_order": "the data order",
    "data_sharding": "which samples each rank sees",
    "resume_point": "the resume point",
    "normalization": "normalization statistics",
}


def changes_phrase(entry: Entry) -> str:
    """What the fix changes, as a phrase: "the batch size and the data order"."""
    words = [CHANGE_WORDS.get(c, c.replace("_", " ")) for c in entry.verify.changes]
    if len(words) <= 1:
        return "".join(words) or "what the run computes"
    return ", ".join(words[:-1]) + " and " + words[-1]


def badge_meaning() -> str:
    """What every fix with the badge does, as the end of a sentence ("... fixes that <this>."),
    naming every kind of change the knowledge can mark."""
    words = list(CHANGE_WORDS.values())
    return f"change {', '.join(words[:-1])} or {words[-1]}, so the experiment's numbers must be checked again"


def verify_headline(entry: Entry) -> str:
    """One line saying whether the fix changes the experiment, naming what it changes."""
    if entry.verify.needed:
        return f"RE-CHECK YOUR EXPERIMENT: this fix changes {changes_phrase(entry)}."
    return "No experiment re-check needed: this fix does not change what the run computes."
