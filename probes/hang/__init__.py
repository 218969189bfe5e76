"""The hang probe: find the job's ranks on this machine and read every rank's Python stack.

Read-only and bounded: py-spy reads each process without stopping it (two non-blocking reads),
all ranks at once, each read under a timeout; the user's source files are read to give the core
the context of the lines the ranks are stuck on. Nothing is started that outlives the call.
"""

from __future__ import annotations

import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from probes.hang.discover import (
    LOCAL_WORLD_VARS,
    Proc,
    all_procs,
    find_agents,
    find_ranks,
    job_key,
    launcher_label,
    launcher_of,
    leftover_children,
    read_proc,
    started_as,
)
from probes.hang.pyspy import StackUnreadable, missing_message, pyspy_binary, sample
from probes.hang.sources import Sources
from probes.hang.workers import stuck_worker, waits_on_loader
from triage.core.hang.locks import read_threads
from triage.core.hang.stacks import RankSample


class NoJob(Exception):
    """No rank process to look at; the message says what was looked for."""


def _identity(proc: Proc, host: str, launcher: str = "") -> RankSample:
    return RankSample(
        pid=proc.pid,
        host=host,
        rank=proc.rank,
        local_rank=proc.local_rank,
        world_size=proc.world_size,
        local_world_size=proc.first(LOCAL_WORLD_VARS),
        launcher=launcher,
        master_addr=proc.env.get("MASTER_ADDR", ""),
    )


def read_rank(
    proc: Proc,
    host: str,
    timeout_s: float,
    deadline: float,
    sources: Sources,
    launcher: str = "",
    children: tuple[int, ...] = (),
) -> RankSample:
    """One rank's sample: its stack read twice (or why not), by `deadline` (time.monotonic). A rank
    whose environment does not say its rank (mp.spawn's) gets it from its stack's arguments; a rank
    waiting on its DataLoader gets the stack of the worker (among `children`) that is stuck."""
    identity = _identity(proc, host, launcher)
    left = deadline - time.monotonic()
    if left <= 0:
        return replace(identity, error=f"not read: the {timeout_s * 2:g} s allowed for all ranks ran out")
    try:
        dump, moving = sample(proc.pid, min(timeout_s, left), rank_of=proc.rank is None and not proc.launcher)
    except StackUnreadable as exc:
        # A rank that ended (or is a zombie) while py-spy read it is gone, not unreadable.
        return replace(identity, error=str(exc), gone=read_proc(proc.pid) is None)
    worker = stuck_worker(list(children), timeout_s, deadline) if waits_on_loader(dump.frames) else None
    worker_pid, worker_frames = worker or (0, ())
    threads = read_threads(dump.threads)
    contexts = sources.contexts((*dump.frames, *worker_frames, *(f for t in threads for f in t.frames)))
    rank = identity.rank if identity.rank is not None else dump.rank
    return replace(
        identity,
        rank=rank,
        frames=dump.frames,
        active=dump.active,
        moving=moving,
        contexts=contexts,
        worker_pid=worker_pid,
        worker_frames=worker_frames,
        threads=threads,
        world_asked=dump.world_asked,
        counters=dump.counters,
        rank_asked=dump.rank_asked,
        p2p=dump.p2p,
    )


def collect(
    pids: list[int] | None = None, timeout_s: float = 5.0
) -> tuple[list[RankSample], list[str], list[Proc]]:
    """Every rank's sample, notes (other jobs seen, ...) and the rank processes. Raises NoJob when
    there is none.

    The ranks are read a few at a time (twice the cores, at least 4, at most 16), all within twice
    `timeout_s`: a rank not reached by then is reported as not read."""
    procs = all_procs()
    try:
        ranks = find_ranks(pids, procs)
    except (LookupError, PermissionError) as exc:
        raise NoJob(str(exc)) from None
    agents = find_agents(pids, procs) if not ranks else []
    if agents:  # no worker yet: the launcher itself is what waits
        ranks = agents
    if not ranks:
        if pids:
            raise NoJob(
                "none of the processes given is a rank of a distributed job (no RANK or LOCAL_RANK in "
                "its environment), or they are not yours to read"
            )
        raise NoJob(
            "no distributed training job found on this machine (no process with RANK or LOCAL_RANK in "
            "its environment that this user can read); give its PIDs with --pid"
        )
    notes: list[str] = []
    jobs: dict[tuple[str, str, str], list[Proc]] = {}
    for proc in ranks:
        jobs.setdefault(job_key(proc, procs), []).append(proc)
    if len(jobs) > 1 and not pids:
        chosen = max(jobs.values(), key=len)
        others = [p for key, procs in jobs.items() if procs is not chosen for p in procs[:1]]
        notes.append(
            f"{len(jobs)} jobs run here; showing the one with {len(chosen)} ranks. Others: "
            + ", ".join(f"PID {p.pid} (port {p.env.get('MASTER_PORT', '?')})" for p in others)
            + "; choose one with --pid"
        )
        ranks = chosen
    found = () if agents else (launcher_of(r, procs) for r in ranks)
    launchers = {id(p): p for p in found if p is not None}
    for launcher in sorted(launchers.values(), key=lambda p: p.pid):
        notes.append(f"launched by {launcher.launcher} (PID {launcher.pid})")
    spawners = {r.ppid: started_as(r, procs) for r in ranks if r.rank is None}
    notes += [
        f"launched by {how} (PID {pid})" for pid, how in sorted(spawners.items()) if how and not launchers
    ]
    notes += [
        f"PID {c.pid} carries rank {c.rank if c.rank is not None else c.local_rank}'s environment but is no rank: a "
        f"child that outlived the process that started it (its parent is now PID {c.ppid}); what it holds (a file "
        "lock, a port, a device) stays held"
        for c in ([] if agents else leftover_children(ranks, procs))
    ]
    children = {r.pid: tuple(p.pid for p in procs.values() if p.ppid == r.pid and p.is_python) for r in ranks}
    labels = {p.pid: p.launcher or "" if agents else launcher_label(p, procs) for p in ranks}
    notes += [f"no rank process runs: read the launcher itself ({a.launcher}, PID {a.pid})" for a in agents]
    host = socket.gethostname()
    if pyspy_binary() is None:
        return (
            [replace(_identity(p, host, labels[p.pid]), error=missing_message()) for p in ranks],
            notes,
            ranks,
        )
    sources = Sources()
    deadline = time.monotonic() + 2 * timeout_s
    workers = min(len(ranks), 16, max(4, 2 * (os.cpu_count() or 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        samples = list(
            pool.map(
                lambda p: read_rank(p, host, timeout_s, deadline, sources, labels[p.pid], children[p.pid]),
                ranks,
            )
        )
    if agents:
        samples = [replace(s, role="agent") for s in samples]
    return samples, notes, ranks
