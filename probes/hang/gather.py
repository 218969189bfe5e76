"""Everything `triage hang` looks at, in one bounded call: the ranks' stacks and the job's own records.

Stacks come from py-spy; where a rank's stack cannot be read (ptrace not permitted, py-spy
missing) the debug server's stack for that rank stands in. Records: Flight Recorder dumps (a
folder the user names, the debug server's `/fr_trace_json`, or the files the job's environment
points at) and NCCL RAS. What the user names and cannot be read is bad input (`HangInputError`);
what triage only tries on its own (the debug server's default port, RAS's) is silently absent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from probes.hang import NoJob, collect
from probes.hang.debug_server import (
    DEFAULT_URL,
    DebugRead,
    ServerUnreadable,
    is_loopback,
    read_dump_dir,
    read_server,
)
from probes.hang.discover import Proc
from probes.hang.flight_recorder import DumpUnreadable, files_in, files_of_job, read_records
from probes.hang.ncclras import RasAbsent, address_of, is_local, read_twice
from probes.hang.sources import Sources
from triage.core.hang.analyse import HangPicture, analyse, visible_slots, with_ras
from triage.core.hang.recorded import RankRecord
from triage.core.hang.stacks import RankSample


class HangInputError(Exception):
    """Something the user named (a folder, an address) cannot be read; one line says what."""


class StacksUnreadable(Exception):
    """No rank's stack can be read and the job recorded nothing to fall back on; the message is the
    reason for the first rank, with what to change."""


@dataclass(frozen=True)
class HangOptions:
    """What `triage hang` was asked to look at, and how long it may take."""

    pids: tuple[int, ...] = ()
    timeout_s: float = 5.0
    fr_dir: str | None = None  # Flight Recorder dumps, one file per rank
    debug_dir: str | None = None  # torch.distributed.debug's dump folder
    debug_url: str | None = None  # its page; None tries http://127.0.0.1:25999
    ras: str | None = None  # NCCL RAS host:port; None: NCCL_RAS_ADDR of the job, else localhost:28028
    recorded: bool = True  # look for the job's own records at all


@dataclass
class Gathered:
    """Everything read from a hung job: stacks, flight-recorder records, NCCL RAS lines."""

    samples: list[RankSample] = field(default_factory=list)
    records: list[RankRecord] = field(default_factory=list)
    ras_lines: tuple[str, ...] = ()
    ras_suspects: tuple[int, ...] = ()
    notes: list[str] = field(default_factory=list)


def _debug(options: HangOptions, sources: Sources, notes: list[str]) -> DebugRead | None:
    if options.debug_dir:
        try:
            return read_dump_dir(options.debug_dir, sources)
        except ServerUnreadable as exc:
            raise HangInputError(str(exc)) from None
    url = options.debug_url or DEFAULT_URL
    if not options.debug_url and not is_loopback(url):
        return None
    try:
        read = read_server(url, min(options.timeout_s, 10.0), sources)
    except ServerUnreadable as exc:
        if options.debug_url:
            raise HangInputError(str(exc)) from None
        return None
    notes.extend(read.notes)
    return read


def _records(
    options: HangOptions, debug: DebugRead | None, procs: list[Proc], sources: Sources, notes: list[str]
) -> list[RankRecord]:
    if options.fr_dir:
        try:
            paths = files_in(options.fr_dir)
        except DumpUnreadable as exc:
            raise HangInputError(str(exc)) from None
        if not paths:
            raise HangInputError(f"{options.fr_dir}: no Flight Recorder dumps (files named <prefix><rank>)")
        records, problems = read_records(paths, sources)
        if not records:
            raise HangInputError(problems[0])
        notes.extend(problems)
        return records
    if debug is not None and debug.records:
        return debug.records
    paths, stale = files_of_job(procs)
    notes.extend(stale)
    records, problems = read_records(paths, sources)
    notes.extend(problems)
    return records


def _with_debug_stacks(
    samples: list[RankSample], debug: DebugRead | None, notes: list[str]
) -> list[RankSample]:
    """Unreadable stacks replaced by the debug server's, where it has them."""
    if debug is None:
        return samples
    stacks = {s.rank: s for s in debug.samples if not s.error}
    if not samples:
        return list(stacks.values())
    out, used = [], []
    for sample in samples:
        stand_in = stacks.get(sample.rank) if sample.error and not sample.gone else None
        if stand_in is None:
            out.append(sample)
            continue
        out.append(replace(sample, frames=stand_in.frames, contexts=stand_in.contexts, error=""))
        used.append(str(sample.rank))
    if used:
        notes.append(f"stacks of rank {', '.join(used)} from the job's debug server ({debug.source})")
    return out


def _ras(options: HangOptions, procs: list[Proc], gathered: Gathered) -> None:
    if options.ras:
        host, _, port = options.ras.rpartition(":")
        if not port.isdigit():
            raise HangInputError(f"--ras {options.ras}: give HOST:PORT (NCCL's default is localhost:28028)")
        named = True
    else:
        host, number = address_of(procs)
        port, named = str(number), False
        if not is_local(host):
            gathered.notes.append(
                f"NCCL_RAS_ADDR points at {host}: not asked (only loopback is); pass --ras {host}:{port}"
            )
            return
    try:
        lines, suspects, _ = read_twice(host or "localhost", int(port), min(options.timeout_s, 10.0))
    except RasAbsent as exc:
        if named:
            raise HangInputError(str(exc)) from None
        return
    gathered.ras_lines, gathered.ras_suspects = lines, suspects


def gather(options: HangOptions) -> Gathered:
    """Stacks and records of the job. Raises NoJob when there is neither a job nor a record of one."""
    gathered = Gathered()
    sources = Sources()
    procs: list[Proc] = []
    no_job: NoJob | None = None
    try:
        gathered.samples, gathered.notes, procs = collect(list(options.pids) or None, options.timeout_s)
    except NoJob as exc:
        no_job = exc
    if not options.recorded:
        if no_job is not None:
            raise no_job
        return gathered
    debug = _debug(options, sources, gathered.notes)
    gathered.records = _records(options, debug, procs, sources, gathered.notes)
    gathered.samples = _with_debug_stacks(gathered.samples, debug, gathered.notes)
    _ras(options, procs, gathered)
    if no_job is not None:
        if not (gathered.samples or gathered.records or gathered.ras_lines):
            raise no_job
        gathered.notes.insert(0, f"no process of the job read here ({no_job}): using what the job recorded")
    return gathered


def live_picture(options: HangOptions) -> tuple[HangPicture, int]:
    """The picture of the job running here, and how many rank slots this node has (for merge).
    Raises NoJob, HangInputError or StacksUnreadable, each with one line saying why."""
    found = gather(options)
    samples, notes = found.samples, list(found.notes)
    unreadable = [s for s in samples if s.error and not s.gone]
    if unreadable and len(unreadable) == len(samples) and not found.records and not found.ras_lines:
        raise StacksUnreadable(unreadable[0].error)
    if unreadable and found.records:
        notes.append(f"{unreadable[0].error}; those ranks are read from the job's Flight Recorder instead")
    picture = with_ras(analyse(samples, found.records), found.ras_lines, found.ras_suspects)
    slots = visible_slots(samples, picture.world_size)
    if notes:
        picture = replace(picture, notes=(*notes, *picture.notes))
    return picture, slots
