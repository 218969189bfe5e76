"""The net probe: NCCL_SOCKET_IFNAME semantics, the real interfaces, a real namespace, a real port."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator

import pytest

from probes import net
from probes.net import IfnameSpec, Interface, analyse_interfaces
from tests.probes.helpers import run_triage, triage_env
from triage.core.facts import ProbeOptions

NAMES = ["eth0", "eth1", "ens5", "docker0", "lo", "ib0"]


@pytest.mark.parametrize(
    ("spec", "chosen"),
    [
        ("eth", ["eth0", "eth1"]),
        ("eth,ib", ["eth0", "eth1", "ib0"]),
        ("=eth0", ["eth0"]),
        ("=eth", []),
        ("^docker,lo", ["eth0", "eth1", "ens5", "ib0"]),
        ("^=eth0", ["eth1", "ens5", "docker0", "lo", "ib0"]),
        ("ens5:1234", ["ens5"]),
        ("bond", []),
    ],
)
def test_nccl_socket_ifname_semantics(spec: str, chosen: list[str]) -> None:
    assert [n for n in NAMES if IfnameSpec.parse(spec).selects(n)] == chosen


def iface(
    name: str, mtu: int, *, up: bool = True, bridge: bool = False, addr: str = "10.0.0.1/24"
) -> Interface:
    return Interface(name, mtu, "up" if up else "down", up, name == "lo", bridge, (addr,))


def test_interface_facts() -> None:
    box = [
        iface("lo", 65536, addr="127.0.0.1/8"),
        iface("eth0", 9000),
        iface("eth1", 1500),
        iface("docker0", 1500, bridge=True),
        iface("eth2", 1500, up=False),
    ]
    report = analyse_interfaces(box, None)
    assert report.facts == {
        "net.socket_ifname_valid": "unset",
        "net.mtu_mismatch": True,
        "net.docker0_present": True,
    }
    assert "eth0 9000, eth1 1500" in report.notes[0]
    pinned = analyse_interfaces(box, "eth0")  # only the pinned interface carries NCCL traffic
    assert pinned.facts["net.socket_ifname_valid"] == "valid" and pinned.facts["net.mtu_mismatch"] is False
    down = analyse_interfaces(box, "eth2")
    assert down.facts["net.socket_ifname_valid"] == "invalid"
    assert "selects no interface that is up (up: lo, eth0, eth1, docker0)" in down.notes[0]
    assert analyse_interfaces(box, "").facts["net.socket_ifname_valid"] == "invalid"


def test_real_interfaces_of_this_machine() -> None:
    kernel = net.addresses_from_kernel(os.listdir(net.SYS_NET))
    found = {i.name: i for i in net.list_interfaces(net.SYS_NET, kernel)}
    assert found["lo"].loopback and found["lo"].up and found["lo"].mtu is not None
    assert any(a.startswith("127.0.0.1") for a in found["lo"].addresses)
    ip_view, _ = net.addresses_from_ip(3.0, threading.Event())
    if ip_view is not None:  # `ip` is installed: the two views agree on every IPv4 address
        for name, addresses in kernel.items():
            for address in addresses:
                if ":" not in address:
                    assert any(a.split("/")[0] == address for a in ip_view.get(name, [])), (name, address)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_master_port_free_and_taken_by_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    monkeypatch.setenv("MASTER_PORT", str(port))
    free = net.probe(ProbeOptions(), threading.Event())
    assert free.facts["net.master_port_free"] is True
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen();"
            "print('ready', flush=True); time.sleep(60)",
            str(port),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        taken = net.probe(ProbeOptions(), threading.Event())
    finally:
        holder.kill()
        holder.wait()
    assert taken.status == "warn" and taken.facts["net.master_port_free"] is False
    assert taken.flagged == ("net.master_port_free",)
    assert (
        f"master port {port} is taken (pid {holder.pid}: {sys.executable} -c import socket" in taken.summary
    )
    assert "(LISTEN)" in taken.summary


def test_master_port_bound_in_this_process_names_it() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert net.port_free(port)[0] is False
        assert f"pid {os.getpid()}" in net.port_holder(port)
    assert net.port_free(port)[0] is True


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace with a veth pair at MTU 9000 / 1500 and a docker0 bridge."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to make a network namespace")
    name = f"triage-{uuid.uuid4().hex[:8]}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False).returncode != 0:
        pytest.skip("this container may not create network namespaces")
    try:
        for command in (
            "ip link set lo up",
            "ip link add a0 mtu 9000 type veth peer name a1 mtu 1500",
            "ip addr add 10.9.0.1/24 dev a0",
            "ip addr add 10.9.1.1/24 dev a1",
            "ip link set a0 up",
            "ip link set a1 up",
            "ip link add docker0 type bridge",
        ):
            subprocess.run(["ip", "netns", "exec", name, *command.split()], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.mark.slow  # creates a network namespace
def test_in_a_network_namespace(netns: str) -> None:
    def probe(ifname: str | None) -> dict[str, object]:
        env = triage_env()
        if ifname is not None:
            env["NCCL_SOCKET_IFNAME"] = ifname
        result = run_triage("probe", "net", "--json", env=env, prefix=["ip", "netns", "exec", netns])
        assert result.returncode in (0, 4), result.stderr
        data = json.loads(result.stdout)["probes"][0]
        assert isinstance(data, dict)
        return data

    unset = probe(None)
    assert unset["facts"] == {
        "net.socket_ifname_valid": "unset",
        "net.mtu_mismatch": True,
        "net.docker0_present": True,
        "net.master_port_free": True,
    }
    assert unset["status"] == "warn" and "a0 9000, a1 1500" in str(unset["summary"])
    listing = unset["evidence"][0]["output"]  # type: ignore[index]
    assert "a0" in listing and "10.9.0.1/24" in listing and "eth0" not in listing
    exact = probe("=a0")
    assert exact["facts"]["net.socket_ifname_valid"] == "valid"  # type: ignore[index]
    assert exact["facts"]["net.mtu_mismatch"] is False  # type: ignore[index]
    assert probe("eth")["facts"]["net.socket_ifname_valid"] == "invalid"  # type: ignore[index]
    assert probe("^a")["facts"]["net.socket_ifname_valid"] == "valid"  # type: ignore[index]  # lo remains
    assert probe("^lo,a,docker")["facts"]["net.socket_ifname_valid"] == "invalid"  # type: ignore[index]


def test_a_named_peer_is_routed_and_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        monkeypatch.setenv("MASTER_PORT", str(port))
        result = net.probe(ProbeOptions(peer_host="127.0.0.1"), threading.Event())
    peer = next(e for e in result.evidence if e.source == "peer 127.0.0.1")
    assert "route leaves from 127.0.0.1 on lo" in peer.output
    assert f"TCP connect to port {port}: open" in peer.output
    assert "peer 127.0.0.1 resolves to 127.0.0.1; route leaves from 127.0.0.1 on lo" in result.summary
