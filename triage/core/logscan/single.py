"""Lines that blame several processes, in a log that shows one.

Some lines name an entry only through a race between processes: `PytorchStreamReader failed reading
zip archive` is every rank saving to one path at once (D23) when the job ran several processes, but
the same line from one process is a file that was never whole (a full disk, a download that stopped,
a copy cut short). The knowledge marks such signatures `several: true`. When the log shows at most
one process (no two ranks, in prefixes or in the launcher's report), their hits count as hints:
their weight scaled down, below what a finding needs on its own, so the entry stays among the
candidates; and the query engine's reading of the same error does not bring it back as the answer
(it reads the words the signature already weighed): the verdict names it as the closest entry and
says what would make it the answer.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from triage.core.logscan.scanner import Event, Scan

if TYPE_CHECKING:
    from triage.core.logscan.verdict import Verdict

# what a `several` line still counts for when the log shows one process: a hint, not a finding
HINT_FACTOR = 0.25


def shows_several(scan: Scan) -> bool:
    """Whether the log shows more than one process: two ranks named, or mp.spawn stopping others."""
    return len(scan.ranks_seen) + scan.ranks_untracked >= 2 or scan.spawn_stopped > 0


def one_process(events: list[Event], scan: Scan) -> list[Event]:
    """`events` with the `several` hits scaled down when the log shows one process at most."""
    if shows_several(scan) or not any(e.several for e in events):
        return events
    return [
        dataclasses.replace(e, weight=round(e.weight * HINT_FACTOR, 3)) if e.several else e for e in events
    ]


def hinted(verdict: Verdict, events: list[Event], scan: Scan) -> Verdict:
    """A verdict the query engine reached on an entry whose own lines were scaled down to hints
    here: no finding, that entry closest, with why."""
    lead = verdict.diagnoses[0] if verdict.by_query_engine and verdict.diagnoses else None
    if lead is None or shows_several(scan):
        return verdict
    if not any(e.several and e.entry_id == lead.entry_id for e in events):
        return verdict
    why = (
        "its line blames several processes racing on one file, and this log shows one process; it is"
        " the answer if more than one process wrote or read that file at once"
    )
    hint = max(e.weight for e in events if e.several and e.entry_id == lead.entry_id)
    verdict.found = False
    verdict.by_query_engine = False
    verdict.closest = [(lead.entry_id, hint, why)]
    return verdict
