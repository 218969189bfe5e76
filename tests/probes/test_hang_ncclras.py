"""The NCCL RAS client against a real socket on loopback speaking RAS's text protocol (the replies
are NCCL's own published output), and the clean "no RAS here" case."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from probes.hang.ncclras import RasAbsent, query, read_twice

RAS = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "ras"


class RasServer:
    """A RAS socket: the handshake, SET FORMAT (JSON only when `json` is True), STATUS -> the next
    of `reports`, then the connection closes, as NCCL's RAS thread does."""

    def __init__(self, reports: list[str], *, json: bool, greeting: str = "SERVER PROTOCOL 2\n") -> None:
        self.reports, self.json, self.greeting = list(reports), json, greeting
        self.commands: list[str] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, conn.makefile("rw", newline="\n") as stream:
                for line in stream:
                    command = line.strip()
                    self.commands.append(command)
                    if command.startswith("CLIENT PROTOCOL"):
                        stream.write(self.greeting)
                    elif command.lower() == "set format json":
                        stream.write("OK\n" if self.json else f"ERROR: Unknown command {command}\n")
                    elif command.lower() == "status":
                        stream.write(self.reports.pop(0) if len(self.reports) > 1 else self.reports[0])
                        break
                    stream.flush()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def servers() -> Iterator[list[RasServer]]:
    made: list[RasServer] = []
    yield made
    for server in made:
        server.close()


def test_json_reports_two_alike_name_the_missing_rank(servers: list[RasServer]) -> None:
    report = (RAS / "docs_status.json").read_text()
    server = RasServer([report], json=True)
    servers.append(server)
    _, suspects, status = read_twice("localhost", server.port, timeout_s=5, gap_s=0.05)
    assert suspects == (1,) and status.comms[0].missing == (1,)
    assert server.commands.count("STATUS") == 2 and "SET FORMAT json" in server.commands


def test_a_server_older_than_json_answers_in_text(servers: list[RasServer]) -> None:
    report = (RAS / "docs_mismatch.txt").read_text()
    server = RasServer([report], json=False)
    servers.append(server)
    assert query("127.0.0.1", server.port, timeout_s=5).startswith("Job summary")
    _, suspects, _ = read_twice("127.0.0.1", server.port, timeout_s=5, gap_s=0.05)
    assert suspects == (0, 2, 3, 4, 5, 7)


def test_counts_that_move_between_the_reads_are_not_a_hang(servers: list[RasServer]) -> None:
    first = (RAS / "docs_mismatch.txt").read_text()
    later = first.replace("6650", "6690").replace("6649", "6689")
    server = RasServer([first, later], json=False)
    servers.append(server)
    lines, suspects, _ = read_twice("127.0.0.1", server.port, timeout_s=5, gap_s=0.05)
    assert (lines, suspects) == ((), ())


def test_nothing_listening_is_absent_not_an_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
    with pytest.raises(RasAbsent, match=f"not answering on localhost:{port} .Connection refused"):
        query("localhost", port, timeout_s=2)


def test_a_socket_that_is_not_ras_is_named(servers: list[RasServer]) -> None:
    server = RasServer(["x"], json=False, greeting="HTTP/1.1 400 Bad Request\n")
    servers.append(server)
    with pytest.raises(RasAbsent, match="is not NCCL RAS"):
        query("127.0.0.1", server.port, timeout_s=2)
