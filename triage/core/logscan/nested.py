"""Workers that start workers: a script that spawns its own ranks (torch.multiprocessing.spawn) run
under a launcher that already started one process per rank (torchrun, torch.distributed.launch).

Each launched worker then spawns a whole world of its own, so two or more processes claim every rank
of one rendezvous: some pairs meet and train, others wait for peers that joined another pair, time
out connecting or find the store's keys taken. The log shows the two launchers' reports together:
mp.spawn's `-- Process N terminated with the following error` and torchrun's own exit report or
failure summary. Whatever error the spawned processes print (a gloo connect timeout, a duplicate
rank) follows from that, so the finding ranks above the signature the error matches (D1: one
process per rank, started by exactly one launcher, which sets the rank environment).
"""

from __future__ import annotations

from triage.core.logscan.rules import Inferred
from triage.core.logscan.scanner import Event, Scan

NESTED = "D1"
NESTED_SCORE = 1.3  # over a connect or store error's own signature, which it explains


def _launcher_exit(event: Event) -> bool:
    """torchrun's exit report or summary line, or the legacy launcher's (its `--local_rank=`)."""
    return event.kind == "exit" and ("local_rank:" in event.text or "--local_rank=" in event.text)


def spawned_under_launcher(events: list[Event], scan: Scan) -> list[Inferred]:
    """D1 when mp.spawn reports a failed process inside a job a launcher started."""
    if scan.spawn_failed is None:
        return []
    reports = [e for e in events if _launcher_exit(e)]
    if not reports and scan.root_cause_rank is None:
        return []
    reason = (
        f"mp.spawn reports its process {scan.spawn_failed} failed inside a job that a launcher (torchrun)"
        " had already started one process per rank for: every launched worker spawned ranks of its own,"
        " so several processes claim each rank"
    )
    return [Inferred(NESTED, NESTED_SCORE, tuple(reports[:2]), reason, True)]
