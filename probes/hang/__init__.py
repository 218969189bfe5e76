"""The hang probe: find the job's ranks on this machine and read every rank's Python stack.

Read-only and bounded: py-spy reads each process without stopping it (two non-blocking reads),
all ranks at once, each read under a timeout; the user's source files are read to give the core
the context of the lines the ranks are stuck on. Nothing is started that outlives the call.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from probes.hang.discover import LOCAL_WORLD_VARS, WORLD_VARS, Proc, find_ranks
from probes.hang.pyspy import StackUnreadable, sample
from triage.core.hang.classify import is_library
from triage.core.hang.source_context import line_context
from triage.core.hang.stacks import LineContext, RankSample

MAX_SOURCE_BYTES = 4 << 20


class NoJob(Exception):
    """No rank process to look at; the message says what was looked for."""


def _job_key(proc: Proc) -> tuple[str, str, str]:
    env = proc.env
    return (env.get("TORCHELASTIC_RUN_ID", ""), env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", ""))


def _source(path: str, cache: dict[str, str | None]) -> str | None:
    if path not in cache:
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_SOURCE_BYTES + 1)
            cache[path] = None if len(data) > MAX_SOURCE_BYTES else data.decode("utf-8", errors="replace")
        except OSError:
            cache[path] = None
    return cache[path]


def _read_rank(proc: Proc, host: str, timeout_s: float, cache: dict[str, str | None]) -> RankSample:
    identity = RankSample(
        pid=proc.pid,
        host=host,
        rank=proc.rank,
        local_rank=proc.local_rank,
        world_size=proc.first(WORLD_VARS),
        local_world_size=proc.first(LOCAL_WORLD_VARS),
    )
    try:
        dump, moving = sample(proc.pid, timeout_s)
    except StackUnreadable as exc:
        return replace(identity, error=str(exc))
    contexts: dict[str, LineContext] = {}
    for frame in dump.frames:
        if not is_library(frame.file):
            text = _source(frame.file, cache)
            if text is not None:
                contexts[frame.where()] = line_context(text, frame.line)
    return replace(identity, frames=dump.frames, active=dump.active, moving=moving, contexts=contexts)


def collect(pids: list[int] | None = None, timeout_s: float = 5.0) -> tuple[list[RankSample], list[str]]:
    """Every rank's sample, and notes (other jobs seen, ...). Raises NoJob when there is none."""
    try:
        ranks = find_ranks(pids)
    except (LookupError, PermissionError) as exc:
        raise NoJob(str(exc)) from None
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
        jobs.setdefault(_job_key(proc), []).append(proc)
    if len(jobs) > 1 and not pids:
        chosen = max(jobs.values(), key=len)
        others = [p for key, procs in jobs.items() if procs is not chosen for p in procs[:1]]
        notes.append(
            f"{len(jobs)} jobs run here; showing the one with {len(chosen)} ranks. Others: "
            + ", ".join(f"PID {p.pid} (port {p.env.get('MASTER_PORT', '?')})" for p in others)
            + "; choose one with --pid"
        )
        ranks = chosen
    host = socket.gethostname()
    cache: dict[str, str | None] = {}
    with ThreadPoolExecutor(max_workers=min(16, len(ranks))) as pool:
        samples = list(pool.map(lambda p: _read_rank(p, host, timeout_s, cache), ranks))
    return samples, notes
