"""The net probe: interfaces, addresses, MTU, bridges, NCCL_SOCKET_IFNAME, and the master port.

Reads /sys/class/net and /proc, asks `ip -j addr` (bounded) for addresses, and test-binds the master
port. Nothing leaves the machine unless the user names a peer host (ProbeOptions.peer_host).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from probes.subproc import command_evidence, evidence, run_command
from triage.core.facts import Evidence, ProbeOptions, ProbeResult, Status

NAME = "net"
KEY_FACTS = ("net.master_port_free", "net.socket_ifname_valid", "net.mtu_mismatch", "net.docker0_present")

SYS_NET = Path("/sys/class/net")
DEFAULT_MASTER_PORT = 29500
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
ARPHRD_LOOPBACK = 772
# Interfaces that never carry traffic between nodes: NCCL itself skips docker* and lo by default.
NOT_DATA_PREFIXES = ("docker", "veth", "virbr", "lo")


@dataclass(frozen=True)
class Interface:
    """A network interface: name, MTU and state."""

    name: str
    mtu: int | None
    operstate: str
    up: bool
    loopback: bool
    bridge: bool
    addresses: tuple[str, ...] = ()

    @property
    def data_candidate(self) -> bool:
        """Up, with a routable address, and neither loopback, a bridge nor container/VM plumbing."""
        routable = any(not a.lower().startswith("fe80:") for a in self.addresses)
        return (
            self.up
            and routable
            and not self.loopback
            and not self.bridge
            and not self.name.startswith(NOT_DATA_PREFIXES)
        )


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def list_interfaces(
    sys_net: Path = SYS_NET, addresses: Mapping[str, Sequence[str]] | None = None
) -> list[Interface]:
    """Every interface this network namespace sees, from sysfs."""
    found = []
    try:
        names = sorted(os.listdir(sys_net))
    except OSError:
        return []
    for name in names:
        base = sys_net / name
        flags_raw = _read(base / "flags")
        flags = int(flags_raw, 16) if flags_raw.startswith("0x") else 0
        mtu_raw = _read(base / "mtu")
        operstate = _read(base / "operstate") or "unknown"
        loopback = _read(base / "type") == str(ARPHRD_LOOPBACK) or bool(flags & IFF_LOOPBACK)
        # "unknown" is what loopback and many virtual links report while passing traffic.
        up = bool(flags & IFF_UP) and operstate in ("up", "unknown")
        found.append(
            Interface(
                name=name,
                mtu=int(mtu_raw) if mtu_raw.isdigit() else None,
                operstate=operstate,
                up=up,
                loopback=loopback,
                bridge=(base / "bridge").is_dir(),
                addresses=tuple((addresses or {}).get(name, ())),
            )
        )
    return found


def addresses_from_ip(
    timeout_s: float, cancel: threading.Event
) -> tuple[dict[str, list[str]] | None, Evidence | None]:
    """Addresses per interface from `ip -j addr` (None when ip is missing or fails)."""
    ip = shutil.which("ip")
    if ip is None:
        return None, None
    result = run_command([ip, "-j", "addr"], timeout_s=timeout_s, cancel=cancel)
    if not result.ok:
        return None, command_evidence(result)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None, command_evidence(result)
    out: dict[str, list[str]] = {}
    for item in data if isinstance(data, list) else []:
        name = item.get("ifname") if isinstance(item, dict) else None
        if isinstance(name, str):
            out[name] = [
                f"{a['local']}/{a.get('prefixlen', '')}"
                for a in item.get("addr_info", [])
                if isinstance(a, dict) and "local" in a
            ]
    return out, None


def addresses_from_kernel(names: Iterable[str]) -> dict[str, list[str]]:
    """Addresses without a subprocess: the primary IPv4 address (SIOCGIFADDR) and /proc/net/if_inet6."""
    out: dict[str, list[str]] = {name: [] for name in names}
    siocgifaddr = 0x8915
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for name in out:
            try:
                raw = fcntl.ioctl(sock.fileno(), siocgifaddr, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
            out[name].append(socket.inet_ntoa(raw[20:24]))
    for line in _read(Path("/proc/net/if_inet6")).splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[5] in out:
            address = socket.inet_ntop(socket.AF_INET6, bytes.fromhex(parts[0]))
            out[parts[5]].append(f"{address}/{int(parts[2], 16)}")
    return out


@dataclass(frozen=True)
class IfnameSpec:
    """NCCL_SOCKET_IFNAME as NCCL reads it: a comma list of prefixes, ^ to exclude, = for exact names."""

    raw: str
    exclude: bool
    exact: bool
    items: tuple[str, ...]

    @classmethod
    def parse(cls, raw: str) -> IfnameSpec:
        text = raw.strip()
        exclude = text.startswith("^")
        text = text[1:] if exclude else text
        exact = text.startswith("=")
        text = text[1:] if exact else text
        # An item may carry ":port" (NCCL's parseStringList); only the name part selects interfaces.
        items = tuple(item.split(":", 1)[0].strip() for item in text.split(",") if item.strip())
        return cls(raw, exclude, exact, items)

    def _listed(self, name: str) -> bool:
        return any(name == item if self.exact else name.startswith(item) for item in self.items)

    def selects(self, name: str) -> bool:
        return not self._listed(name) if self.exclude else self._listed(name)


def port_free(port: int) -> tuple[bool, str]:
    """Whether a server could listen on `port` on every address (IPv4 and, where present, IPv6)."""
    attempts = [(socket.AF_INET, ("0.0.0.0", port))]
    if socket.has_ipv6:
        attempts.append((socket.AF_INET6, ("::", port)))
    for family, address in attempts:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 in this namespace
        with sock:
            # SO_REUSEADDR, as the c10d store sets it: sockets in TIME_WAIT do not count as holders.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False, f"bind {address[0]}:{port}: {exc.strerror}"
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue
                return False, f"bind {address[0]}:{port}: {exc.strerror}"
    return True, f"bind 0.0.0.0:{port} and [::]:{port}: ok (released at once)"


def socket_inodes(port: int, proc_net: Path = Path("/proc/net")) -> dict[int, str]:
    """Socket inodes bound to local `port` (from /proc/net/tcp and tcp6), with their TCP state."""
    states = {"0A": "LISTEN", "01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT"}
    found: dict[int, str] = {}
    for table in ("tcp", "tcp6"):
        for line in _read(proc_net / table).splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10 or ":" not in parts[1]:
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port and parts[9] != "0":
                found[int(parts[9])] = states.get(parts[3], parts[3])
    return found


def socket_owners(inodes: Iterable[int], proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, command line) of the processes holding any of these socket inodes (those we may see)."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners: list[tuple[int, str]] = []
    if not wanted:
        return owners
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # gone, or another user's process
        for fd in fds:
            try:
                if os.readlink(fd) in wanted:
                    raw = (entry / "cmdline").read_bytes()
                    cmd = " ".join(p.decode("utf-8", "replace") for p in raw.split(b"\0") if p)
                    owners.append((int(entry.name), cmd[:200]))
                    break
            except OSError:
                continue
    return owners


def port_holder(port: int) -> str:
    """Who holds `port`, in words, or why that cannot be seen."""
    inodes = socket_inodes(port)
    if not inodes:
        return "no socket on this port is visible in /proc/net/tcp (another network namespace?)"
    owners = socket_owners(inodes)
    states = ", ".join(sorted(set(inodes.values())))
    if not owners:
        return f"a socket ({states}) owned by a process this user cannot see (run as its owner or root)"
    return "; ".join(f"pid {pid}: {cmd}" for pid, cmd in owners) + f" ({states})"


def master_port(env: Mapping[str, str]) -> tuple[int, str]:
    """The rendezvous port this job would use, and where that came from."""
    raw = env.get("MASTER_PORT", "").strip()
    if raw.isdigit() and 0 < int(raw) < 65536:
        return int(raw), "MASTER_PORT"
    return (
        DEFAULT_MASTER_PORT,
        "MASTER_PORT unset: the default" if not raw else f"MASTER_PORT={raw!r} is not a port: the default",
    )


@dataclass
class NetReport:
    """What the net probe found: facts, notes and evidence."""

    facts: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)


def analyse_interfaces(interfaces: Sequence[Interface], ifname: str | None) -> NetReport:
    """The interface facts (socket_ifname_valid, mtu_mismatch, docker0_present). Pure."""
    report = NetReport()
    up = [i for i in interfaces if i.up]
    if ifname is None:
        report.facts["net.socket_ifname_valid"] = "unset"
        candidates = [i for i in interfaces if i.data_candidate]
    else:
        spec = IfnameSpec.parse(ifname)
        chosen = [i for i in up if spec.selects(i.name)]
        report.facts["net.socket_ifname_valid"] = "valid" if chosen and spec.items else "invalid"
        if not chosen or not spec.items:
            shown = ", ".join(i.name for i in up) or "none"
            report.notes.append(
                f"NCCL_SOCKET_IFNAME={ifname!r} selects no interface that is up (up: {shown})"
            )
        candidates = [i for i in chosen if not i.loopback]
        report.evidence.append(
            evidence(
                f"NCCL_SOCKET_IFNAME={ifname} ({'exclude' if spec.exclude else 'include'}, "
                f"{'exact names' if spec.exact else 'prefixes'})",
                f"selects: {', '.join(i.name for i in chosen) or 'nothing'}",
            )
        )
    mtus = {i.mtu for i in candidates if i.mtu is not None}
    report.facts["net.mtu_mismatch"] = len(mtus) > 1
    if len(mtus) > 1:
        report.notes.append(
            "data interfaces disagree on MTU: " + ", ".join(f"{i.name} {i.mtu}" for i in candidates)
        )
    bridges = [i.name for i in interfaces if i.bridge or i.name.startswith("docker")]
    report.facts["net.docker0_present"] = bool(bridges)
    if bridges and ifname is None:
        report.notes.append(
            f"bridge {', '.join(bridges)} present and NCCL_SOCKET_IFNAME unset: NCCL may pick it on multi-node"
        )
    return report


def _peer_route(host: str, port: int, interfaces: Sequence[Interface]) -> str:
    """Which local address and interface reach `host` (a UDP connect: the kernel routes, nothing is sent),
    and whether a TCP connection to host:port opens."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        return f"{host}: cannot resolve ({exc})"
    family, _, _, _, address = infos[0]
    lines = [f"{host} resolves to {address[0]}"]
    with socket.socket(family, socket.SOCK_DGRAM) as udp:
        try:
            udp.connect(address)
            local = udp.getsockname()[0]
            via = [i for i in interfaces if any(a.split("/")[0] == local for a in i.addresses)]
            lines.append(
                f"route leaves from {local}" + (f" on {via[0].name} (mtu {via[0].mtu})" if via else "")
            )
        except OSError as exc:
            lines.append(f"no route: {exc.strerror}")
    with socket.socket(family, socket.SOCK_STREAM) as tcp:
        tcp.settimeout(2.0)
        try:
            tcp.connect(address)
            lines.append(f"TCP connect to port {port}: open")
        except OSError as exc:
            lines.append(f"TCP connect to port {port}: {exc.strerror or exc}")
    return "\n".join(lines)


def probe(options: ProbeOptions, cancel: threading.Event) -> ProbeResult:
    """The net probe on this machine's network namespace."""
    env = os.environ
    addrs, ip_failure = addresses_from_ip(max(0.5, min(3.0, options.timeout_s / 3)), cancel)
    names = os.listdir(SYS_NET) if SYS_NET.is_dir() else []
    source = "ip -j addr"
    if addrs is None:
        addrs = addresses_from_kernel(names)
        source = "SIOCGIFADDR + /proc/net/if_inet6"
    interfaces = list_interfaces(SYS_NET, addrs)
    if not interfaces:
        return ProbeResult(NAME, "unavailable", summary=f"{SYS_NET} lists no interface (no sysfs here?)")
    report = analyse_interfaces(interfaces, env.get("NCCL_SOCKET_IFNAME"))
    table = "\n".join(
        f"{i.name:<12} {'up' if i.up else 'down':<4} mtu {i.mtu or '?':<6} "
        f"{'loopback ' if i.loopback else ''}{'bridge ' if i.bridge else ''}{' '.join(i.addresses)}"
        for i in interfaces
    )
    proof = [evidence(f"/sys/class/net (+ addresses from {source})", table)]
    if ip_failure is not None:
        proof.append(ip_failure)
    proof.extend(report.evidence)

    port, port_source = master_port(env)
    free, bind_text = port_free(port)
    report.facts["net.master_port_free"] = free
    port_lines = [f"port {port} ({port_source})", bind_text]
    if not free:
        holder = port_holder(port)
        port_lines.append(f"held by: {holder}")
        report.notes.insert(0, f"master port {port} is taken ({holder})")
    proof.append(evidence(f"master port {port}", "\n".join(port_lines)))

    peer = ""
    if options.peer_host:
        peer = _peer_route(options.peer_host, port, interfaces)
        proof.append(evidence(f"peer {options.peer_host}", peer))

    flagged = [
        name
        for name, bad in (
            ("net.master_port_free", not free),
            ("net.socket_ifname_valid", report.facts.get("net.socket_ifname_valid") == "invalid"),
            ("net.mtu_mismatch", report.facts["net.mtu_mismatch"] is True),
        )
        if bad
    ]
    status: Status = "warn" if flagged else "ok"
    if report.notes:
        summary = "; ".join(report.notes)
    else:
        data = [f"{i.name} mtu {i.mtu}" for i in interfaces if i.data_candidate]
        summary = f"port {port} free; data interfaces: {', '.join(data) or 'none up'}"
    if peer:  # the user named the host: what was found towards it belongs in the one line
        summary += "; peer " + "; ".join(peer.splitlines())
    return ProbeResult(NAME, status, report.facts, tuple(proof), summary=summary, flagged=tuple(flagged))
