"""Consequence rules: what a line means given what came before it, on its rank and on the others.

A signature says what a line is; these rules say whether it is a cause or a consequence, the way
an engineer reading eight ranks' output would:

- after a rank's timeout (or another echo), what that rank prints next is part of the same story:
  the FlightRecorder hint, "taking the entire process down", the abort, the terminate;
- an abort after a rank's own error is its echo (`terminate called without an active exception`
  once the exception has been printed);
- NCCL's error classes (`ncclSystemError: unhandled system error`) are umbrellas: when the
  `Last error:` line or an NCCL WARN on that rank names the cause, the umbrella is only context;
- a traceback frame that a signature matches says where a rank was, never why it failed;
- a failure to connect to a `(host, port)` c10d said it cannot resolve follows from the name;
  one to a literal IP address c10d knocked on itself follows from that knock (addresses.py);
- a rank's error naming another as absent (the monitored barrier) only waited, when that other
  rank died of a signal, exited without a word, or ended well (it had left).

And the patterns no single line shows, each a diagnosis of its own (see `inferred`):

- ranks blocked in different collectives, or in one collective called from different lines of
  the user's code: a collective only some ranks call (D21, with D19's toolkit);
- one rank failed with its own error and another rank's output echoes it: one rank diverged (D20);
- a rank exited non-zero and printed nothing of its own: its traceback is missing (P4);
- torchrun restarting the worker group after a worker died: one event, the restart (MN5);
- a rank that lost its peer while torchrun saw every other worker end well: the others ran out
  of batches (D9), or, when the peer reset the connection, completed a call of another size (D19);
- a worker dead of a SIGTERM its launcher never sent, and a job interrupted by hand (signals.py).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

from triage.core.logscan.addresses import reached_addresses
from triage.core.logscan.blocks import WaitPoint, mismatch
from triage.core.logscan.scanner import SUBSTANTIVE_WEIGHT, Event, Scan
from triage.core.logscan.structure import SIGABRT_EXIT

DIVERGED = "D20"  # one rank failed with its own error and the others waited for it
MISMATCH = "D21"  # ranks wait in collectives that will never pair up
DESYNC_TOOLKIT = "D19"  # how to name the rank and collective (the desync debug toolkit)
MISSING_TRACEBACK = "P4"  # a rank exited with an error and printed nothing
RESTART = "MN5"  # torchrun restarted the worker group
SHARED_GPU = "D3"  # two ranks of one host on one GPU

DIVERGED_SCORE = 0.85
MISMATCH_SCORE = 1.1
TOOLKIT_SCORE = 0.8
# Above DIVERGED_SCORE: a rank that died without a word is read by getting its traceback first.
MISSING_SCORE = 0.9
PEER_LEFT = "D9"  # a rank lost its peer mid-collective, and the peer ended well: it ran out of batches
PEER_LEFT_SCORE = 1.1  # over the monitored barrier's own signature, which it explains
SHARED_GPU_SCORE = 1.0
# c10d's warning that a name does not resolve; the target is `host, port` as printed.
_UNRESOLVED = re.compile(r"network addresses of \((?P<target>[^()]{1,200})\) cannot be retrieved \(gai error")
# torch's monitored barrier naming the ranks that never arrived.
NAMES_ABSENT = re.compile(r"\bRanks? (?P<ranks>\d+(?:, ?\d+){0,64}) failed to pass monitoredBarrier")
# A collective that ended because the other end of the connection went away.
_PEER_GONE = re.compile(r"Connection (closed|reset) by peer|remote process exited", re.IGNORECASE)
SPECIFIC_WEIGHT = 0.9  # a signature this specific keeps its meaning even after a timeout
# Launcher lines: torchrun reporting and tearing down, not a surviving worker's own output.
_LAUNCHER = re.compile(
    r"torch/distributed/elastic/|ChildFailedError|Root Cause \(first observed|error_file:"
    r"|To enable traceback see|Sending process \d+ closing signal|sigkill_handler|^\s*traceback\s*:"
    r"|^\s*exitcode\s*:|failed \(exitcode: -?\d+\) local_rank"
    r"|Signal \d+ \(SIG\w+\) received by PID",
    re.IGNORECASE,
)


def signalled(code: int | None) -> bool:
    """An exit status that says a signal ended the process (-N from torchrun, 128+N from a shell),
    not a Python exception whose traceback could be missing."""
    return code is not None and (code < 0 or code > 128)


@dataclass(frozen=True)
class Inferred:
    """A diagnosis from a pattern across lines or ranks."""

    entry_id: str
    score: float
    evidence: tuple[Event, ...]
    reason: str
    explains_first: bool


def peer_gone(text: str) -> bool:
    """A collective that ended because the other end of the connection went away."""
    return _PEER_GONE.search(text) is not None


def is_launcher(event: Event) -> bool:
    """A line of the launcher reporting on its workers (an exit, the failure summary, a teardown)."""
    return event.kind == "exit" or _launcher_text(event.text)


@functools.lru_cache(maxsize=4096)
def _launcher_text(text: str) -> bool:
    # Asked several times for each event while the verdict is reasoned out.
    return bool(_LAUNCHER.search(text))


def is_context(event: Event) -> bool:
    """A hit whose line cannot be a cause by its form (a frame, an NCCL umbrella)."""
    return event.kind == "hit" and event.role in ("frame", "umbrella", "info")


def consequences(
    events: list[Event], root_cause_alone: int | None = None, root_cause: int | None = None
) -> list[Event]:
    """The events (in time order) with the echoes and context the rules above find.
    `root_cause_alone`: the rank torchrun's summary names as the only worker that failed;
    `root_cause`: the rank the launcher saw fail first (torchrun's summary, mp.spawn's report)."""
    events = blamed_the_dead(reached_addresses(unresolved_targets(events)), root_cause_alone, root_cause)
    named_cause = {
        e.rank
        for e in events
        if e.kind in ("detail", "warn")
        or (e.kind == "hit" and not e.echo and e.role == "" and e.weight >= 0.8)
    }
    waited: set[int | None] = set()  # ranks that already echoed a wait
    failed: set[int | None] = set()  # ranks that already had an error of their own
    result = []
    for event in events:
        rank = event.rank
        if event.kind == "hit" and event.role == "umbrella" and not _cause_named(rank, named_cause):
            event = dataclasses.replace(event, role="")  # no detail anywhere: the umbrella is the cause
        if event.echo and not is_launcher(event):
            waited.add(rank)
        elif (rank in waited and _follows_a_wait(event)) or (event.kind == "abort" and rank in failed):
            event = _as_echo(event)
        if event.real and event.kind != "exit" and not is_context(event):
            failed.add(rank)
        result.append(event)
    return result


def _cause_named(rank: int | None, named_cause: set[int | None]) -> bool:
    """Whether a line names the cause of an umbrella on `rank`; a line with no rank prefix (one
    process's paste) may be any rank's own, so it pairs with either side."""
    return rank in named_cause or (bool(named_cause) and (rank is None or None in named_cause))


def unresolved_targets(events: list[Event]) -> list[Event]:
    """c10d's warning that a `(host, port)` cannot be resolved, then a failure to connect to that
    same `(host, port)`: the name is the cause and the connect failure only its consequence (torch
    2.13 prints the warning only when the name does not resolve at all)."""
    warned: set[str] = set()  # `(host, port)` as the warnings print it, in time order
    confirmed: set[str] = set()
    result = []
    for event in events:
        found = _UNRESOLVED.search(event.text) if event.kind == "hit" else None
        if found is not None:
            warned.add(f"({found['target']})")
        else:
            target = next((t for t in warned if t in event.text), None)
            if target is not None and event.real and event.kind != "exit":
                confirmed.add(target)
                event = _as_echo(event)
        result.append(event)
    if not confirmed:
        return events
    promoted = []
    for event in result:
        found = _UNRESOLVED.search(event.text) if event.kind == "hit" else None
        if found is not None and f"({found['target']})" in confirmed:
            event = dataclasses.replace(event, role="", weight=max(event.weight, SPECIFIC_WEIGHT))
        promoted.append(event)
    return promoted


def blamed_the_dead(
    events: list[Event], root_cause_alone: int | None = None, root_cause: int | None = None
) -> list[Event]:
    """A rank that another rank's error names as the one that never arrived (`Ranks 1 failed to
    pass monitoredBarrier`) is only waited for when that rank was gone: the launcher reports it
    killed by a signal of its own (a segfault, SIGKILL, SIGABRT; not the SIGTERM it sends itself)
    or exiting with an error status it printed nothing about, whatever the timestamps say (the
    launcher notices a death only at its next poll); or it ended well while the naming rank was
    torchrun's only failure (`root_cause_alone`): it had left. So is a rank that had already
    failed with an error of its own, earlier in the log or as the launcher's first observed
    failure (`root_cause`: mp.spawn prints that process's traceback only after it has died)."""
    spoke = {
        e.rank for e in events if e.real and e.kind != "exit" and not is_launcher(e) and not is_context(e)
    }
    dead = {
        e.rank
        for e in events
        if e.kind == "exit"
        and e.rank is not None
        and e.real
        and (signalled(e.exit_code) or e.rank not in spoke)
    }
    # ranks with an error of their own: so far, and the launcher's first observed failure
    failed: set[int | None] = {root_cause} if root_cause is not None and root_cause in spoke else set()
    result = []
    for event in events:
        named = NAMES_ABSENT.search(event.text) if event.kind != "exit" else None
        if named is not None and event.rank not in dead:
            ranks = {int(r) for r in re.findall(r"\d+", named["ranks"])}
            left = root_cause_alone is not None and event.rank == root_cause_alone
            if ranks & (dead | failed) - {event.rank} or (left and root_cause_alone not in ranks):
                event = _as_echo(event)
        if event.real and event.kind != "exit" and not is_launcher(event) and not is_context(event):
            failed.add(event.rank)
        result.append(event)
    return result


def _follows_a_wait(event: Event) -> bool:
    if event.kind in ("terminate", "abort"):
        return True
    if event.kind == "exit":
        return signalled(event.exit_code)
    return event.kind == "hit" and event.weight < SPECIFIC_WEIGHT and event.role == ""


def _as_echo(event: Event) -> Event:
    return dataclasses.replace(event, echo=True)


def survivor_echoes(events: list[Event], first: Event) -> list[Event]:
    """Echo lines printed by a worker other than the one that failed first (not the launcher)."""
    found = []
    for event in events:
        if event.kind != "hit" or not event.echo or is_launcher(event):
            continue
        if event.rank is not None and event.rank == first.rank:
            continue
        if (
            event.rank is None
            and first.rank is None
            and event.source == first.source
            and event.line <= first.line
        ):
            continue
        found.append(event)
    return found


def inferred(events: list[Event], first: Event | None, scan: Scan) -> list[Inferred]:
    """The diagnoses that come from patterns across lines and ranks."""
    found: list[Inferred] = []
    pair = mismatch(scan.ranks.waits)
    if pair is not None:
        found.extend(_mismatch(pair, events, first))
    found.extend(_shared_gpu(scan))
    from triage.core.logscan.device_rank import global_rank_device  # builds on Inferred, defined here

    found.extend(i for i in (global_rank_device(events, scan),) if i is not None)
    from triage.core.logscan.heads import from_heads  # heads.py builds on Inferred, defined here

    found.extend(from_heads(scan.heads, quiet=first is None))
    from triage.core.logscan.steps import hung_in_collective, same_call_timeouts, uneven_steps

    found.extend(uneven_steps(events, first, scan) + hung_in_collective(first, scan))
    found.extend(same_call_timeouts(events, scan))
    from triage.core.logscan.nested import spawned_under_launcher  # likewise

    found.extend(spawned_under_launcher(events, scan))
    if first is None:
        return found
    from triage.core.logscan.signals import interrupted, killed_from_outside  # likewise

    found.extend(i for i in (killed_from_outside(events), interrupted(events, scan)) if i is not None)
    from triage.core.logscan.restarts import restart  # likewise

    restarted = restart(events, first, scan)
    if restarted is not None:
        found.append(restarted)
        return found
    from triage.core.logscan.steps import peer_left

    left = peer_left(events, first, scan)
    if left is not None:
        found.append(left)
    # A call torch's own check refused (an argument the API rejects) fails the same way wherever it
    # is made: the ranks that did not make it only lost a peer to a bug in the call, not a diverged rank.
    if first.real and not (first.refused or first.native_check):
        echoes = survivor_echoes(events, first)
        who = f"rank {first.rank}" if first.rank is not None else "one process"
        if echoes:
            found.append(
                Inferred(
                    DIVERGED,
                    DIVERGED_SCORE,
                    (first, *echoes[:5]),
                    f"{who} failed first with an error of its own; the other ranks' output only echoes it",
                    True,
                )
            )
        elif scan.spawn_stopped or _torchrun_stopped(events, first, scan):
            reason = f"{who} failed first with an error of its own; {'mp.spawn' if scan.spawn_stopped else 'torchrun'} then stopped the other ranks"
            found.append(Inferred(DIVERGED, DIVERGED_SCORE, (first,), reason, True))
    from triage.core.logscan.assertions import failed_assertion  # likewise

    asserted = failed_assertion(events, first)
    if asserted is not None:
        found.append(asserted)
    missing = _missing_traceback(scan, first) or _bare_abort(events, first, scan)
    if missing is not None:
        found.append(missing)
    return found


def _torchrun_stopped(events: list[Event], first: Event, scan: Scan) -> bool:
    """torchrun stopped the other ranks, silent, after an error no signature names (a named one is
    left to its signature: torchrun also stops ranks about to fail the same way)."""
    if not scan.launcher_stopped or first.kind == "hit" or first.rank != scan.root_cause_rank:
        return False
    own = [e for e in events if e.real and e.kind != "exit" and not is_launcher(e) and not is_context(e)]
    # The same error printed by more than one process (before the group exists torch puts no rank
    # in front): every worker failed the same way, and torchrun only stopped one already failing.
    repeated = sum(1 for e in own if e.kind == first.kind and e.text == first.text) > 1
    return not repeated and all(e.rank in (None, first.rank) for e in own)


def _left_in_barrier(events: list[Event], gone: int | None, scan: Scan) -> Event | None:
    """Another rank's loss of `gone` inside a barrier (a barrier `gone` never called)."""
    for event in events:
        if event.rank in (None, gone) or not event.echo or not peer_gone(event.text):
            continue
        wait = scan.ranks.waits.get(event.rank)
        if wait is not None and wait.collective == "barrier":
            return event
    return None


_POINT_TO_POINT = frozenset({"send", "recv"})


def _mismatch(pair: tuple[WaitPoint, WaitPoint], events: list[Event], first: Event | None) -> list[Inferred]:
    a, b = pair
    evidence = tuple(e for e in events if (e.source, e.line) in ((a.source, a.line), (b.source, b.line)))

    def where(point: WaitPoint) -> str:
        return f"rank {point.rank} waits in {point.collective}" + (f" ({point.where})" if point.where else "")

    explains = first is not None and first.rank in (a.rank, b.rank)
    if {a.collective, b.collective} == _POINT_TO_POINT:
        # A send and a recv are each other's partners: both waiting means they disagree on the peer,
        # the tag or the count of messages, not that a rank skipped a call the others made.
        reason = f"{where(a)} while {where(b)}: the send and the recv never match (peer, tag or count)"
        return [Inferred(DESYNC_TOOLKIT, MISMATCH_SCORE, evidence, reason, explains)]
    reason = f"{where(a)} while {where(b)}: the collectives never pair up"
    return [
        Inferred(MISMATCH, MISMATCH_SCORE, evidence, reason, explains),
        Inferred(DESYNC_TOOLKIT, TOOLKIT_SCORE, evidence, reason, False),
    ]


def _shared_gpu(scan: Scan) -> list[Inferred]:
    """NCCL's `comm ... rank R ... busId B` lines: two ranks of one host on the same GPU."""
    for (host, bus), ranks in sorted(scan.gpus.items()):
        if len(ranks) > 1:
            where = f" on {host}" if host else ""
            listed = ", ".join(str(r) for r in sorted(ranks))
            return [
                Inferred(
                    SHARED_GPU,
                    SHARED_GPU_SCORE,
                    (),
                    f"ranks {listed} all use the GPU at busId {bus}{where}",
                    True,
                )
            ]
    return []


def _bare_abort(events: list[Event], first: Event, scan: Scan) -> Inferred | None:
    """A rank that died of SIGABRT whose only words are `terminate called without an active
    exception` (a process torn down with its process group alive, as after sys.exit; the line has
    no rank prefix of its own): nothing says why it stopped. Unless another rank lost it inside a
    barrier: then it had simply ended, never calling that barrier (D21)."""
    if first.rank is None:
        return None
    aborted = any(e.kind == "exit" and e.rank == first.rank and e.exit_code == SIGABRT_EXIT for e in events)
    bare = any(e.kind == "abort" and e.rank in (first.rank, None) for e in events)
    if not (aborted and bare):
        return None
    if any(
        e.rank == first.rank and e.real and e.kind not in ("exit", "abort") and not is_launcher(e)
        for e in events
    ):
        return None
    waiting = _left_in_barrier(events, first.rank, scan)
    if waiting is not None:
        reason = (
            f"rank {first.rank} ended (its abort is a teardown's, with no error) while rank {waiting.rank}"
            " waited in a barrier it never called"
        )
        return Inferred(MISMATCH, MISMATCH_SCORE, (waiting, first), reason, True)
    return Inferred(
        MISSING_TRACEBACK,
        MISSING_SCORE,
        (first,),
        f"rank {first.rank} aborted with no exception and printed no error of its own: why it stopped is not here",
        True,
    )


def _missing_traceback(scan: Scan, first: Event) -> Inferred | None:
    """A worker that exited with an error status and printed nothing of its own. A traceback no
    prefix attributes to a rank may be that worker's: then nothing is missing."""
    if first.kind != "exit" or first.rank is None or signalled(first.exit_code):
        return None
    if first.exit_code is None or first.exit_code <= 0:
        return None
    # (torchrun's own traceback, all in its library, is not a worker's; nor is mp.spawn's, which
    # passes through the user's main() to report the worker's exit)
    if any(
        block.rank is None and block.user_frame is not None and not block.spawn_parent
        for block in scan.ranks.blocks
        if block.source == first.source
    ):
        return None
    return Inferred(
        MISSING_TRACEBACK,
        MISSING_SCORE,
        (first,),
        f"rank {first.rank} exited with status {first.exit_code} and its own output (the traceback) is not here",
        True,
    )


def substantive(event: Event, own_lines: set[int | None]) -> bool:
    """A rank's own failure: what the first failure is chosen from (warnings come after these)."""
    if event.kind == "exit":
        return event.real and event.rank not in own_lines
    if event.kind == "hit":
        return not event.echo and event.weight >= SUBSTANTIVE_WEIGHT and event.role == ""
    return event.kind in ("exception", "terminate", "detail")


def warning(event: Event) -> bool:
    """A substantive signature on a warning line: the cause when no error line names one."""
    return (
        event.kind == "hit"
        and not event.echo
        and event.weight >= SUBSTANTIVE_WEIGHT
        and event.role == "warning"
    )
