"""Who wrote a log line: the rank prefixes launchers put in front of every line, and rank hints.

Launchers tag each line with the rank that printed it, each in its own way:

- torchrun `--tee 3`: `[default0]:` (role name + local rank), `[host1:0]:` with `--role host1:`,
  `[3]:` with `TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE='[${rank}]:'`; older versions drop the colon;
- torch's own excepthook once the process group exists: `[rank3]: Traceback ...`;
- srun `--label`: `3: ` (padded with spaces on wide jobs);
- Open MPI `--tag-output`: `[1,3]<stderr>:`;
- pdsh (DeepSpeed's multi-node runner) and clush: the host, `worker-1: ` (no rank of its own);
- Ray actors (vLLM, verl): `(RayWorkerWrapper pid=1890, ip=10.41.0.8) `; vLLM's own workers:
  `(VllmWorkerProcess pid=13359) ` (these name a process, not a rank: peeled, no rank);
- NCCL's own lines: `host:pid:tid [3] ` where the bracket is the CUDA device, the local rank.

torch's Python logger relaying a worker's traceback at error level (`E0422 05:07:49.013000 204
torch/distributed/elastic/multiprocessing/api.py:732] `) is peeled too: the rest is the worker's.
Collectors put a timestamp in front of all of them (`kubectl logs --timestamps`:
`2024-05-01T12:00:00.123456789Z `, `mpirun --timestamp-output`: `Fri Aug 11 12:31:45 2023`,
`[2025-05-10 23:09:41] `); it is peeled too, and the timestamp module reads it.

Prefixes nest (`[default0]:[rank0]: ...`), so they are peeled one at a time. When no prefix names
the rank, the message itself often does (`[Rank 1] Watchdog caught ...`, `[PG ID 0 ... Rank 3]`),
and a per-rank log file's path does (torchrun `--log-dir .../attempt_0/3/stderr.log`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BRACKET = re.compile(
    r"\[(?:(?P<host>[A-Za-z0-9_.-]*[A-Za-z_.-][A-Za-z0-9_.-]*|\d+):|(?P<role>[A-Za-z_][A-Za-z_.-]*?))?"
    r"(?P<rank>\d{1,6})\]:? ?"
)
_MPI = re.compile(r"\[\d+,(?P<rank>\d{1,6})\]<std(?:out|err)>: ?")
_SRUN = re.compile(r" {0,6}(?P<rank>\d{1,6}): ")
# pdsh (DeepSpeed's multi-node runner, clush) puts the host in front: `worker-1: ...`. A host
# name is lower case with a digit or a hyphen, which a Python exception or module path is not.
# With a hostfile of addresses the host is an IPv4 address (`10.0.87.143: `), and a runner that
# wraps pdsh repeats it (`10.0.87.143: 10.0.87.143: ...`).
_PDSH = re.compile(r"(?P<host>(?=[a-z0-9.-]*[0-9-])[a-z][a-z0-9.-]{0,62}[a-z0-9]|\d{1,3}(?:\.\d{1,3}){3}): ")
_PROCESS = re.compile(r"\((?:[A-Za-z_][\w.]*) pid=\d+(?:, ip=[\w.:-]+)?\) ")
_NCCL = re.compile(r"(?P<host>[\w.-]+):\d+:\d+ \[(?P<rank>\d{1,4})\] ")
_COLLECTOR_TIME = re.compile(
    r"(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)? "
    r"|\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\] "
    r"|(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4} ?)"
)

# torch's Python logger at error level relaying a worker's output (the fork start method:
# `E0422 05:07:49.013000 204 torch/distributed/elastic/multiprocessing/api.py:732] RuntimeError: ...`,
# every line of the worker's traceback so). Peeled when what follows has a traceback's shape: that
# is the worker's own line, where the launcher's reports (`...api.py:869] failed (exitcode: 1)`)
# keep the prefix that says whose they are. (C++ glog lines, `[E810 ... ProcessGroupNCCL.cpp:683]`,
# keep theirs: their level is the line's own.)
# vLLM's logger writes its own shape of it: `ERROR 04-15 00:31:11 worker_base.py:574] `.
_PY_LOGGER_ERROR = re.compile(
    r"(?:[EF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)? +\d+|(?:ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)"
    r" [\w./\\-]{1,300}\.py:\d+\] ?"
)
_TRACEBACK_SHAPE = re.compile(
    r"Traceback \(most recent call last\)|\s+\S|File \"|[\w.]{0,200}(?:Error|Exception|Interrupt|Exit)(?::|\s*$)"
)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# A paste's indentation and quote marks (`> ` in a reply, `>> ` nested); `>>>` is a prompt, kept.
_INDENT_STARTS = frozenset(" \t>")
_PASTE_INDENT = re.compile(r"^(?:\s*>(?!>>)\s?)*\s*")

# Rank named inside the message, most specific first; only used when no prefix names it.
_BODY_RANK = re.compile(
    r"\[Rank (?P<a>\d+)\]|\bRank (?P<b>\d+)\]|\[rank(?P<c>\d+)\]|\blocal[_ ]rank: ?(?P<d>\d+)"
    r"|\brank (?P<e>\d+) (?:is|failed|exhausted)\b|^Rank (?P<f>\d+)\b"
    r"|\bprocess (?P<g>\d+) terminated with (?:signal|exit code)\b"  # mp.spawn's ProcessExitedException
    r"|unrecognized arguments: (?:\S{1,200} ){0,20}--local[-_]rank=(?P<h>\d+)"  # the legacy launcher's argument
    r"|\bProcess Group destroyed on rank (?P<i>\d+)"  # ProcessGroupNCCL's destructor, as a rank ends
    r"|\bdid not receive grad for rank (?P<j>\d+)",  # DDP's unused-parameter report (debug INFO/DETAIL)
    re.IGNORECASE,
)
_PATH_RANK = re.compile(r"(?:^|[/_.-])(?:rank|worker|proc)[_-]?(?P<rank>\d{1,6})(?:$|[/_.-])", re.IGNORECASE)
_LOG_DIR_RANK = re.compile(r"(?:^|/)(?P<rank>\d{1,6})/(?:stdout|stderr|error)\.(?:log|json)$")


@dataclass(frozen=True)
class Split:
    """A line without its launcher prefixes: the rank (and host) they named, and the message."""

    rank: int | None
    host: str | None
    body: str


def split_prefix(line: str) -> Split:
    """Peel every launcher prefix off the front of `line` (after the paste's own noise: colour
    codes, the indentation and `> ` quote marks a forum or an issue adds)."""
    rank: int | None = None
    host: str | None = None
    body = clean(line)
    for depth in range(5):  # nested prefixes are at most a few deep
        match = _BRACKET.match(body) or _MPI.match(body)
        if match is None and rank is None:
            match = _SRUN.match(body)
        if match is None:
            peeled = (
                (_COLLECTOR_TIME.match(body) if depth == 0 else None)
                or _PROCESS.match(body)
                or _relayed(body)
            )
            if peeled is None and rank is None:
                pdsh = _PDSH.match(body)
                if pdsh is not None and host in (None, pdsh["host"]):
                    peeled, host = pdsh, pdsh["host"]
            if peeled is None:
                break
            body = body[peeled.end() :]
            continue
        rank = int(match.group("rank"))
        found_host = match.groupdict().get("host")
        if found_host:
            host = found_host
        body = body[match.end() :]
    nccl = _NCCL.match(body)
    if nccl is not None:
        if rank is None:
            rank = int(nccl.group("rank"))
        host = host or nccl.group("host")
        body = body[nccl.end() :]
    return Split(rank, host, body)


def _relayed(body: str) -> re.Match[str] | None:
    """torch's logger's prefix on a line of a worker's traceback it relays, or None."""
    match = _PY_LOGGER_ERROR.match(body)
    if match is None or _TRACEBACK_SHAPE.match(body, match.end()) is None:
        return None
    return match


def clean(line: str) -> str:
    """`line` without ANSI colour codes and without the indentation or `>` quote marks in front."""
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line[:1] in _INDENT_STARTS:  # most lines start with their prefix: no regex for them
        return _PASTE_INDENT.sub("", line, count=1)
    return line


def rank_in_message(body: str) -> int | None:
    """A rank the message names about itself (`[Rank 1] Watchdog ...`), if any."""
    match = _BODY_RANK.search(body)
    if match is None:
        return None
    for value in match.groups():
        if value is not None:
            return int(value)
    return None


def rank_from_path(path: str) -> int | None:
    """The rank a per-rank log file's name carries (`rank3.log`, `.../attempt_0/3/stderr.log`)."""
    normalized = path.replace("\\", "/")
    match = _LOG_DIR_RANK.search(normalized) or _PATH_RANK.search(normalized.rsplit("/", 1)[-1])
    return int(match.group("rank")) if match else None
