"""Where the ranks' stacks stand. A stack dump (faulthandler, a traceback) that shows a rank
inside a collective in a log where nothing failed is a job hanging in that collective (MN3: the
rank waits for peers that do not arrive). And ranks at different training steps: one still inside a
step's backward (DDP's gradient all-reduce) while another has left the loop. Reading the ranks' tracebacks the way an engineer
would, that is uneven data (D9): the rank with fewer batches went on to what follows the loop
(a metric all-reduce, a barrier) and met a peer still training.

- one rank waits in backward while another waits in a collective that is not a backward: they
  are at different steps (a rank-conditional backward does not happen; D21's collectives are
  the ones written under `if rank == 0`);
- the first failure is a collective mismatch (gloo's size check, the desync report) on a rank
  that is not in backward while another rank is: the same, caught by the mismatch check.

And every rank timed out inside the same collective, called from the same line: no rank was late
or gone (a slow or dead rank is the one that is not waiting there), so the calls themselves do not
pair up: another root or destination, another size, a different count of earlier calls (D19). A
barrier takes no arguments, so ranks timing out together at one barrier are left to the timeout.

And a rank that lost its peer mid-collective while every other worker ended well: the peer left
after its last batch (D9), unless it reset the connection, leaving this rank's data unread: then
it had completed the same call with a smaller size or count (D19).
"""

from __future__ import annotations

from triage.core.logscan.rules import (
    MISMATCH,
    NAMES_ABSENT,
    PEER_LEFT,
    PEER_LEFT_SCORE,
    Inferred,
    is_launcher,
    peer_gone,
)
from triage.core.logscan.scanner import Event, Scan

HUNG = "MN3"  # a rank's stack inside a collective, and no failure anywhere: a hang in it
HUNG_SCORE = 0.6  # a finding only where nothing else is (the mismatch of two ranks is D21's, 1.1)
UNEVEN = "D9"
UNEVEN_SCORE = 1.2  # over the mismatch (D21, 1.1) and the size check's own signature (D19)
DESYNC = "D19"  # the entry whose signatures name a collective mismatch
SAME_CALL_SCORE = 1.1  # as the mismatch of two ranks' collectives (rules.MISMATCH_SCORE)
_NO_ARGUMENTS = frozenset({"barrier", "backward"})


def uneven_steps(events: list[Event], first: Event | None, scan: Scan) -> list[Inferred]:
    """D9 when one rank is still in a training step's backward and another is past its loop."""
    waits = scan.ranks.waits
    backward = sorted(rank for rank, wait in waits.items() if wait.collective == "backward")
    if not backward:
        return []
    elsewhere = sorted(rank for rank, wait in waits.items() if wait.collective != "backward")
    mismatch = (
        first is not None
        and first.kind == "hit"
        and first.entry_id == DESYNC
        and not first.echo
        and first.rank is not None
        and first.rank not in backward
    )
    if not elsewhere and not mismatch:
        return []
    training = waits[backward[0]]
    where = f" ({training.where})" if training.where else ""
    if elsewhere:
        other = waits[elsewhere[0]]
        past = f"rank {other.rank} waits in {other.collective}" + (f" ({other.where})" if other.where else "")
    else:
        assert first is not None
        past = f"rank {first.rank} failed a collective of another size or kind"
    reason = (
        f"rank {training.rank} is still in a training step's backward{where} while {past}:"
        " the ranks ran different numbers of steps (one had fewer batches)"
    )
    evidence = tuple(
        e for e in events if (e.source, e.line) == (training.source, training.line) or e is first
    )
    return [Inferred(UNEVEN, UNEVEN_SCORE, evidence, reason, True)]


def hung_in_collective(first: Event | None, scan: Scan) -> list[Inferred]:
    """A rank's dumped stack inside a collective in a log where nothing failed: the job hangs there."""
    if first is not None or not scan.ranks.waits:
        return []
    wait = min(scan.ranks.waits.values(), key=lambda w: w.rank)
    where = f" ({wait.where})" if wait.where else ""
    reason = (
        f"rank {wait.rank}'s stack is inside {wait.collective}{where} and nothing failed: the job hangs"
        " in that collective, waiting for ranks that do not arrive"
    )
    return [Inferred(HUNG, HUNG_SCORE, (), reason, False)]


def same_call_timeouts(events: list[Event], scan: Scan) -> list[Inferred]:
    """D19 when every rank timed out inside one collective called from one line, and none failed
    with an error of its own."""
    waits = scan.ranks.waits
    points = list(waits.values())
    if len(points) < 2 or set(waits) != scan.ranks_seen:
        return []
    call = {(w.collective, w.where) for w in points}
    if len(call) != 1 or not points[0].where or points[0].collective in _NO_ARGUMENTS:
        return []
    timed_out: set[int] = set()
    for event in events:
        if event.rank is None or event.kind == "exit":
            continue
        if event.real and event.entry_id != HUNG:
            return []  # a rank's own error explains the wait
        if event.entry_id == HUNG and "timed out" in event.text.lower():
            timed_out.add(event.rank)
    if timed_out != set(waits):
        return []
    wait = points[0]
    reason = (
        f"every rank timed out inside the same {wait.collective} ({wait.where}) and none was late or"
        " gone: the calls do not pair up (another root or destination, size or order on some rank)"
    )
    evidence = tuple(e for e in events if e.entry_id == HUNG and e.rank is not None)[:4]
    return [Inferred(DESYNC, SAME_CALL_SCORE, evidence, reason, True)]


def peer_left(events: list[Event], first: Event, scan: Scan) -> Inferred | None:
    """The only failure is one rank's wait that ended with its peer gone (`Connection closed by
    peer`), and torchrun saw every other worker end well: the peer finished its loop and left
    while this rank still had batches to run. A reset reads the same as a close: whether the peer's
    socket still held unread data when it exited is timing (the D9-NOJOIN reproduction, ranks out
    of batches, prints a reset), so it does not tell calls of another size apart."""
    # mp.spawn reporting this rank, with no other process left to stop: the others had ended, and
    # well (a process that failed first would have been the one reported)
    spawn_alone = scan.spawn_failed == first.rank and scan.spawn_stopped == 0
    if not (first.echo and first.rank is not None and (scan.no_other_failures or spawn_alone)):
        return None
    if not (peer_gone(first.text) or NAMES_ABSENT.search(first.text)):
        return None  # a timeout: the peer may still be computing (MN3), not gone
    if any(
        e.rank != first.rank and (e.real or e.echo) and not is_launcher(e)
        for e in events
        if e.rank is not None
    ):
        return None  # the summary's lines about a worker torchrun stopped are not that worker's words
    wait = scan.ranks.waits.get(first.rank)
    where = f" ({wait.where})" if wait is not None and wait.where else ""
    if wait is not None and wait.collective == "barrier" and peer_gone(first.text):
        # A barrier the others left without ever calling: a barrier only some ranks reach (a
        # rank-0-only save or evaluation), not a loop that ran out of batches mid-step.
        reason = (
            f"rank {first.rank} lost its peer inside a barrier{where} while no other rank failed:"
            " the other ranks ended without ever calling it"
        )
        return Inferred(MISMATCH, PEER_LEFT_SCORE, (first,), reason, True)
    return Inferred(
        PEER_LEFT,
        PEER_LEFT_SCORE,
        (first,),
        f"rank {first.rank} lost its peer inside a collective while no other rank failed:"
        " the other ranks finished their loop (fewer batches) and left",
        True,
    )
