"""Reading torch.distributed.debug's server: its dump folder, or its pages on loopback.

`start_debug_server(dump_dir=...)` writes `stacks_<time>.txt` (every rank's threads, taken by the
rank's own worker server, so it works where ptrace does not) and `fr_trace_<time>.txt` (torch's
merged Flight Recorder table; torch 2.13 fails to build it for gloo groups, so the raw records are
read from the page `/fr_trace_json` or from dump files instead). Its page on rank 0 (port 25999 by
default) serves `/stacks` and `/fr_trace_json`. Only loopback is asked unless the user names a host.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from probes.hang.flight_recorder import DumpUnreadable, read_record
from probes.hang.sources import Sources
from triage.core.hang.debug_dump import main_thread, page_sections, rank_sections
from triage.core.hang.recorded import RankRecord
from triage.core.hang.stacks import RankSample

DEFAULT_URL = "http://127.0.0.1:25999"
MAX_PAGE_BYTES = 64 << 20
_STACKS_FILE = re.compile(r"^stacks(?:_\d{8}_\d{6})?\.txt$")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


class ServerUnreadable(Exception):
    """The server or folder gave nothing usable; the message says what and where."""


@dataclass
class DebugRead:
    """What the debug server gave: stacks as samples, Flight Recorder records, where from."""

    source: str
    samples: list[RankSample] = field(default_factory=list)
    records: list[RankRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _host(address: str) -> str:
    return urllib.parse.urlparse(address).hostname or ""


def _samples(sections: dict[int, tuple[str, bool]], sources: Sources, source: str) -> list[RankSample]:
    samples = []
    for rank, (text, answered) in sorted(sections.items()):
        frames = main_thread(text) if answered else ()
        error = "" if frames else f"the debug server has no stack for rank {rank} ({source})"
        samples.append(
            RankSample(
                pid=0, host="", rank=rank, frames=frames, error=error, contexts=sources.contexts(frames)
            )
        )
    return samples


def newest_stacks(directory: str | Path) -> Path | None:
    """The newest stacks dump of a debug server's dump folder (the time is in the name)."""
    try:
        names = [n for n in os.listdir(directory) if _STACKS_FILE.match(n)]
    except OSError as exc:
        raise ServerUnreadable(f"{directory}: {exc.strerror or exc}") from None
    return Path(directory, max(names)) if names else None


def read_dump_dir(directory: str | Path, sources: Sources) -> DebugRead:
    """The ranks' stacks from the newest `stacks_*.txt` of a dump folder."""
    path = newest_stacks(directory)
    if path is None:
        raise ServerUnreadable(f"{directory}: no stacks_<time>.txt of torch.distributed.debug's server")
    try:
        if not path.is_file() or path.stat().st_size > MAX_PAGE_BYTES:
            raise ServerUnreadable(f"{path}: not a regular file of sane size")
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ServerUnreadable(f"{path}: {exc.strerror or exc}") from None
    sections = rank_sections(text)
    if not sections:
        raise ServerUnreadable(f"{path}: no `=== Rank N` sections: not a debug server stacks dump")
    return DebugRead(str(path), samples=_samples(sections, sources, str(path)))


def _get(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body: bytes = response.read(MAX_PAGE_BYTES)
            return body.decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerUnreadable(f"{url}: {reason}") from None


def read_server(url: str, timeout_s: float, sources: Sources) -> DebugRead:
    """Stacks from `/stacks` and Flight Recorder records from `/fr_trace_json`."""
    if urllib.parse.urlparse(url).scheme not in ("http", "https"):
        raise ServerUnreadable(f"{url}: not an http:// address")
    base = url.rstrip("/")
    read = DebugRead(f"debug server {base}")
    sections = page_sections(_get(f"{base}/stacks", timeout_s))
    if not sections:
        raise ServerUnreadable(f"{base}/stacks: no `Rank N` sections: not torch.distributed.debug's page")
    read.samples = _samples(sections, sources, f"{base}/stacks")
    try:
        pages = page_sections(_get(f"{base}/fr_trace_json", timeout_s))
    except ServerUnreadable as exc:
        read.notes.append(f"no Flight Recorder from the debug server: {exc}")
        return read
    for rank, (text, answered) in sorted(pages.items()):
        if not answered:
            continue
        try:
            read.records.append(
                read_record(rank, f"{base}/fr_trace_json rank {rank}", sources, json.loads(text))
            )
        except (ValueError, DumpUnreadable) as exc:
            read.notes.append(f"rank {rank}'s Flight Recorder from the debug server is unreadable: {exc}")
    return read


def is_loopback(url: str) -> bool:
    """Whether the URL names this machine (only loopback servers are contacted unasked)."""
    return _host(url) in LOOPBACK
