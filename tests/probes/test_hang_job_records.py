"""Reading what a hung job recorded about itself: real Flight Recorder dumps and real pages and dump
files of torch.distributed.debug's server, captured from the D21 reproduction (rank 0 in a barrier
under `if rank == 0:`, rank 1 in the training loop's all_reduce), and what must be refused."""

from __future__ import annotations

import http.server
import os
import pickle
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from probes.hang.debug_server import ServerUnreadable, read_dump_dir, read_server
from probes.hang.discover import read_proc
from probes.hang.flight_recorder import DumpUnreadable, files_in, files_of_job, load_dump, read_records
from probes.hang.sources import Sources
from triage.core.hang.classify import classify, user_frame
from triage.core.hang.record_compare import compare, state_from_record

HANG = Path(__file__).resolve().parents[1] / "fixtures" / "hang"
SCRIPT = "hang_rank0_barrier.py"


def _user_line(frames: tuple[object, ...]) -> str:
    frame = user_frame(frames)  # type: ignore[arg-type]
    assert frame is not None
    return f"{Path(frame.file).name}:{frame.line}"


def test_real_flight_recorder_dumps_name_the_diverging_collective() -> None:
    records, problems = read_records(files_in(HANG / "fr_d21"), Sources())
    assert problems == [] and [r.rank for r in records] == [0, 1]
    zero, one = (r.waiting_in() for r in records)
    assert zero is not None and one is not None
    assert (zero.op, zero.seq, one.op, one.seq) == ("barrier", 1, "all_reduce", 1)
    assert _user_line(zero.frames) == f"{SCRIPT}:24" and _user_line(one.frames) == f"{SCRIPT}:16"
    assert records[0].world_size == 2
    findings = compare(records)
    assert findings.mismatch == "different"
    assert "the ranks disagree on collective #1" in findings.lines[-1]
    state = state_from_record(records[0])
    assert (state.kind, state.collective) == ("collective", "barrier")
    assert state.user_frame is not None and state.user_frame.line == 24


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "planted"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {planted}",))  # noqa: TID251  (the exploit under test)

    dump = tmp_path / "rank_0"
    dump.write_bytes(pickle.dumps({"version": "2.10", "entries": [Exploit()]}))
    with pytest.raises(DumpUnreadable, match="refused to load"):
        load_dump(dump)
    assert not planted.exists()


def test_bad_files_are_refused_with_their_name(tmp_path: Path) -> None:
    garbage = tmp_path / "rank_0"
    garbage.write_bytes(b"\x80\x05\xff\x00binary garbage")
    with pytest.raises(DumpUnreadable, match="rank_0: not a Flight Recorder dump"):
        load_dump(garbage)
    fifo = tmp_path / "rank_1"
    os.mkfifo(fifo)
    with pytest.raises(DumpUnreadable, match="not a regular file"):
        load_dump(fifo)  # never opened: it would block
    huge = tmp_path / "rank_2"
    with open(huge, "wb") as handle:
        handle.truncate(65 << 20)
    with pytest.raises(DumpUnreadable, match="larger than any Flight Recorder dump"):
        load_dump(huge)
    assert sorted(files_in(tmp_path)) == [0, 2]  # the FIFO is no dump file
    other = tmp_path / "rank_3"
    other.write_text('{"hello": 1}')
    records, problems = read_records({3: other}, Sources())
    assert records == [] and "not a Flight Recorder dump" in problems[0]


def test_a_json_dump_reads_like_the_pickle(tmp_path: Path) -> None:
    page = (HANG / "debug_fr_trace_json_page.html").read_text()
    rank_one = re.findall(r"<pre>(.*?)</pre>", page, re.DOTALL)[1]
    (tmp_path / "fr_1").write_text(rank_one)
    (record,) = read_records(files_in(tmp_path), Sources())[0]
    op = record.waiting_in()
    assert op is not None and (op.op, op.seq, op.frames) == ("all_reduce", 1, ())


def test_dumps_older_than_the_rank_are_left_aside(tmp_path: Path) -> None:
    me = read_proc(os.getpid())
    assert me is not None
    prefix = str(tmp_path / "nccl_trace_rank_")
    old, new = Path(f"{prefix}0"), Path(f"{prefix}1")
    old.write_bytes((HANG / "fr_d21" / "rank_0").read_bytes())
    new.write_bytes((HANG / "fr_d21" / "rank_1").read_bytes())
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    env = {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
    ranks = [
        type(me)(me.pid, me.ppid, me.argv, {**env, "RANK": "0"}),
        type(me)(me.pid, me.ppid, me.argv, {**env, "RANK": "1"}),
    ]
    chosen, notes = files_of_job(ranks)
    assert chosen == {1: new}
    assert len(notes) == 1 and "older than rank 0's process" in notes[0]


def test_debug_server_dump_folder_gives_each_ranks_main_thread() -> None:
    read = read_dump_dir(HANG / "debug_dump", Sources())
    assert read.source.endswith("stacks_20261122_204904.txt")  # the newest of the folder
    zero, one = (classify(s) for s in read.samples)
    assert (zero.rank, zero.kind, zero.collective) == (0, "collective", "barrier")
    assert (one.rank, one.kind, one.collective) == (1, "collective", "all_reduce")
    assert zero.user_frame is not None and zero.user_frame.where().endswith(f"{SCRIPT}:24")


def test_a_folder_without_stacks_dumps_is_named(tmp_path: Path) -> None:
    with pytest.raises(ServerUnreadable, match=r"no stacks_<time>\.txt"):
        read_dump_dir(tmp_path, Sources())
    (tmp_path / "stacks_20260101_000000.txt").write_text("hello\n")
    with pytest.raises(ServerUnreadable, match="not a debug server stacks dump"):
        read_dump_dir(tmp_path, Sources())
    with pytest.raises(ServerUnreadable, match="No such file"):
        read_dump_dir(tmp_path / "missing", Sources())


class _Pages(http.server.BaseHTTPRequestHandler):
    pages: ClassVar[dict[str, bytes]] = {}

    def do_GET(self) -> None:
        body = self.pages.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"Handler not found")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def page_server() -> Iterator[tuple[str, dict[str, bytes]]]:
    pages: dict[str, bytes] = {}
    handler = type("Handler", (_Pages,), {"pages": pages})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()
    server.server_close()


def test_debug_server_pages_give_stacks_and_flight_recorders(
    page_server: tuple[str, dict[str, bytes]],
) -> None:
    url, pages = page_server
    pages["/stacks"] = (HANG / "debug_stacks_page.html").read_bytes()
    pages["/fr_trace_json"] = (HANG / "debug_fr_trace_json_page.html").read_bytes()
    read = read_server(url, 5, Sources())
    states = [classify(s) for s in read.samples]
    assert [(s.rank, s.collective) for s in states] == [(0, "barrier"), (1, "all_reduce")]
    assert compare(read.records).mismatch == "different"
    del pages["/fr_trace_json"]
    assert "no Flight Recorder from the debug server" in read_server(url, 5, Sources()).notes[0]


def test_debug_server_pages_that_are_not_its_own_are_refused(
    page_server: tuple[str, dict[str, bytes]],
) -> None:
    url, pages = page_server
    pages["/stacks"] = b"<html>a different server</html>"
    with pytest.raises(ServerUnreadable, match=r"not torch\.distributed\.debug's page"):
        read_server(url, 5, Sources())
    pages["/stacks"] = (
        b"<h2>Rank 0: http://vm:1/handler/dump_traceback?</h2>\n<p>Failed to fetch: status=503</p>\n"
        b"<pre>ConnectionError: refused</pre>"
    )
    (sample,) = read_server(url, 5, Sources()).samples
    assert sample.rank == 0 and "has no stack for rank 0" in sample.error
