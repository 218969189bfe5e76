"""Reading Flight Recorder dumps: one file per rank, named `<prefix><rank>`, as `torchfrtrace` reads them.

A dump is the pickle `torch._C._distributed_c10d._dump_fr_trace()` returns (NCCL jobs write it on
a watchdog timeout to `TORCH_FR_DUMP_TEMP_FILE` / `TORCH_NCCL_DEBUG_INFO_TEMP_FILE` + rank; gloo
jobs record entries when `TORCH_FR_BUFFER_SIZE` is set, and write them when the job asks), or its
JSON twin. The pickle holds only plain values, so it is read by an unpickler that refuses every
class and function: a hostile file cannot run code here. Files are read only when they are regular
files of sane size; a dump older than the rank's process is left aside as another run's.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import stat
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from probes.hang.discover import Proc, started_at
from probes.hang.sources import Sources
from triage.core.hang.recorded import RankRecord, ops_from_dump, world_from_dump

MAX_DUMP_BYTES = 64 << 20
PREFIX_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
NCCL_DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"
_RANK_SUFFIX = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)$")


class DumpUnreadable(ValueError):
    """A file that is not a readable Flight Recorder dump; the message names it and why."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a Flight Recorder dump holds none")


def load_dump(path: str | Path) -> object:
    """The decoded dump (pickle or JSON), refusing anything that is not a plain regular file."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise DumpUnreadable(f"{path}: not a regular file")
        if info.st_size > MAX_DUMP_BYTES:
            raise DumpUnreadable(f"{path}: {info.st_size} bytes, larger than any Flight Recorder dump")
        with open(path, "rb") as handle:
            data = handle.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise DumpUnreadable(f"{path}: {exc.strerror or exc}") from None
    if data[:1] in (b"{", b"["):
        try:
            return json.loads(data)
        except ValueError:
            raise DumpUnreadable(f"{path}: not valid JSON") from None
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        MemoryError,
    ) as exc:
        raise DumpUnreadable(f"{path}: not a Flight Recorder dump ({exc})") from None


def read_record(rank: int, path: str | Path, sources: Sources, data: object | None = None) -> RankRecord:
    """One rank's record from its dump file (or from `data` already decoded from it)."""
    decoded = load_dump(path) if data is None else data
    try:
        ops = ops_from_dump(decoded)
    except ValueError as exc:
        raise DumpUnreadable(f"{path}: {exc}") from None
    world = world_from_dump(decoded) if isinstance(decoded, Mapping) else None
    frames = [f for op in ops if op.pending for f in op.frames]
    return RankRecord(rank, str(path), ops, world, sources.contexts(frames))


def files_in(directory: str | Path) -> dict[int, Path]:
    """The dump files of a folder: names ending in the rank, under the commonest prefix."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise DumpUnreadable(f"{directory}: {exc.strerror or exc}") from None
    found = [(m["prefix"], int(m["rank"]), name) for name in names if (m := _RANK_SUFFIX.match(name))]
    regular = [
        (prefix, rank, name) for prefix, rank, name in found if os.path.isfile(os.path.join(directory, name))
    ]
    if not regular:
        return {}
    prefix = Counter(p for p, _, _ in regular).most_common(1)[0][0]
    return {rank: Path(directory, name) for p, rank, name in regular if p == prefix}


def files_of_job(procs: Iterable[Proc]) -> tuple[dict[int, Path], list[str]]:
    """The dumps the job's own environment points at, newer than the rank that wrote them."""
    chosen: dict[int, Path] = {}
    notes: list[str] = []
    for proc in procs:
        prefix = next((proc.env[v] for v in PREFIX_VARS if proc.env.get(v)), "")
        if not prefix and any(proc.env.get(v, "0").strip() not in ("", "0") for v in BUFFER_VARS):
            prefix = NCCL_DEFAULT_PREFIX
        if not prefix or proc.rank is None:
            continue
        path = Path(f"{prefix}{proc.rank}")
        try:
            written = os.stat(path).st_mtime
        except OSError:
            continue
        started = started_at(proc.pid)
        if started is not None and written < started - 2:
            notes.append(f"{path} is older than rank {proc.rank}'s process: left aside (another run's dump)")
            continue
        chosen[proc.rank] = path
    return chosen, notes


def read_records(paths: Mapping[int, Path], sources: Sources) -> tuple[list[RankRecord], list[str]]:
    """Every rank's record that can be read, and a line per file that cannot."""
    records, problems = [], []
    for rank in sorted(paths):
        try:
            records.append(read_record(rank, paths[rank], sources))
        except DumpUnreadable as exc:
            problems.append(str(exc))
    return records, problems
