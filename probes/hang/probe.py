"""The hang probe: `triage hang`'s look at the job running on this machine, as probe facts.

The walk offers it where the user says the job froze mid-run ("look at the running job now"):
`hang.first_entry` names the entry the picture leads to and branches the walk there. With no job
here, or no stack and no record readable, it is unavailable and the walk asks instead. Bounded by
the probe's timeout (a third of it for the stack reads); TRIAGE_HANG_PID (PIDs, comma-separated)
limits it to one job where several run.
"""

from __future__ import annotations

import os
import threading

from probes.subproc import evidence
from triage.core.facts import ProbeOptions, ProbeResult, Status

NAME = "hang"
KEY_FACTS = ("hang.verdict", "hang.first_entry", "hang.suspects")
PIDS_VAR = "TRIAGE_HANG_PID"


def pids_from_env() -> tuple[int, ...]:
    """The PIDs TRIAGE_HANG_PID names (a launcher's stands for its ranks); empty: every job here."""
    raw = os.environ.get(PIDS_VAR, "")
    return tuple(int(p) for p in raw.replace(" ", ",").split(",") if p.strip().isdigit())


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The hang probe: the picture of a job hanging on this machine, as facts."""
    from probes.hang import NoJob
    from probes.hang.gather import HangInputError, HangOptions, StacksUnreadable, live_picture

    try:
        picture, _ = live_picture(
            HangOptions(pids=pids_from_env(), timeout_s=max(1.0, options.timeout_s / 3))
        )
    except (NoJob, HangInputError, StacksUnreadable) as exc:
        return ProbeResult(NAME, "unavailable", summary=str(exc))
    if cancel.is_set():
        return ProbeResult(NAME, "error", summary="cancelled")
    facts: dict[str, object] = {
        "hang.verdict": "hang" if picture.diagnoses else "no_hang",
        "hang.suspects": list(picture.suspect_ranks),
        "hang.ranks": len([s for s in picture.ranks if s.pid or s.kind != "exited"]),
    }
    if picture.diagnoses:
        facts["hang.first_entry"] = picture.diagnoses[0].entry.lower()  # enum values are lower case
    lines = [f"verdict: {picture.verdict}"]
    lines += [f"rank {','.join(str(r) for r in g.ranks)}: {g.state.describe()}" for g in picture.groups]
    lines += [f"suspect ranks: {', '.join(str(r) for r in picture.suspect_ranks)}"] * bool(
        picture.suspect_ranks
    )
    lines += [f"recorded: {line}" for line in picture.recorded]
    lines += [f"note: {note}" for note in picture.notes]
    if picture.diagnoses:
        lines += [f"evidence: {e}" for e in picture.diagnoses[0].evidence]
    status: Status = "fail" if picture.diagnoses else "ok"
    flagged = ("hang.verdict", "hang.first_entry") if picture.diagnoses else ()
    return ProbeResult(
        NAME,
        status,
        facts,
        (evidence("triage hang (every rank's stack, and what the job recorded)", "\n".join(lines)),),
        summary=picture.verdict,
        flagged=flagged,
    )
