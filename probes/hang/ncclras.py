"""Asking NCCL RAS for the job's status on its local socket, twice, as `ncclras` does.

The protocol is text (NCCL's docs: `echo verbose status | nc localhost 28028`): the client sends
`CLIENT PROTOCOL 2`, the server answers `SERVER PROTOCOL N`; `SET FORMAT json` (NCCL 2.28.7+)
answers `OK`; `STATUS` answers with the report and closes. Nothing answering is the normal case
(no NCCL job, or RAS off) and is reported as absent, not as an error. Only loopback is asked
unless the user names the address.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable

from probes.hang.discover import Proc
from triage.core.hang.ras import RasStatus, parse, stuck

DEFAULT_PORT = 28028
PROTOCOL = 2
MAX_REPLY_BYTES = 16 << 20
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "")


class RasAbsent(Exception):
    """Nothing answered as NCCL RAS at the address; the message says where it looked."""


def address_of(procs: Iterable[Proc]) -> tuple[str, int]:
    """NCCL_RAS_ADDR from the job's environment (host:port), else localhost:28028."""
    for proc in procs:
        value = proc.env.get("NCCL_RAS_ADDR", "")
        if value:
            host, _, port = value.rpartition(":")
            if port.isdigit():
                return host.strip("[]") or "localhost", int(port)
    return "localhost", DEFAULT_PORT


def is_local(host: str) -> bool:
    """Whether `host` is this machine (the RAS port is only queried locally)."""
    return host in LOOPBACK_HOSTS


def _line(sock: socket.socket, deadline: float) -> str:
    data = b""
    while not data.endswith(b"\n") and len(data) < 4096:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        chunk = sock.recv(4096 - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").strip()


def _connect(host: str, port: int, deadline: float) -> socket.socket:
    target = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    try:
        sock = socket.create_connection((target, port), timeout=max(0.05, deadline - time.monotonic()))
    except OSError as exc:
        raise RasAbsent(f"NCCL RAS is not answering on {target}:{port} ({exc.strerror or exc})") from None
    try:
        sock.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
        hello = _line(sock, deadline)
    except OSError as exc:
        sock.close()
        raise RasAbsent(f"{target}:{port} did not answer the RAS handshake ({exc})") from None
    if not hello.upper().startswith("SERVER PROTOCOL"):
        sock.close()
        raise RasAbsent(f"{target}:{port} is not NCCL RAS (it answered {hello[:60]!r})")
    return sock


def query(host: str, port: int, timeout_s: float) -> str:
    """One status report (JSON where the server speaks it, else text)."""
    deadline = time.monotonic() + timeout_s
    sock = _connect(host, port, deadline)
    try:
        sock.sendall(b"SET FORMAT json\n")
        if _line(sock, deadline).upper() != "OK":  # before NCCL 2.28.7: text only, on a new connection
            sock.close()
            sock = _connect(host, port, deadline)
        sock.sendall(b"STATUS\n")
        chunks, size = [], 0
        while size < MAX_REPLY_BYTES:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RasAbsent(f"NCCL RAS at {host}:{port} stopped answering ({exc})") from None
    finally:
        sock.close()
    return b"".join(chunks).decode(errors="replace")


def read_twice(
    host: str, port: int, timeout_s: float, gap_s: float = 1.0
) -> tuple[tuple[str, ...], tuple[int, ...], RasStatus]:
    """Lines and suspect ranks that hold in two reports `gap_s` apart, and the second report."""
    try:
        first = parse(query(host, port, timeout_s))
        time.sleep(gap_s)
        second = parse(query(host, port, timeout_s))
    except ValueError as exc:
        raise RasAbsent(f"NCCL RAS at {host}:{port} answered something unreadable ({exc})") from None
    lines, suspects = stuck(first, second)
    return lines, suspects, second
