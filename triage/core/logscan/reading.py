"""Getting a log's lines to the scanner: opening inputs, refusing bad ones, and the two engines.

This is the one module of triage.core.logscan that reads files and runs a program; the scanner and the
verdict stay pure. Both engines hand the scanner the same candidate lines (those holding a
signature's anchor) and refuse the same inputs with the same one-line message: a binary head, a
line longer than the cap.

- `python` reads blocks of whole lines and lets Scanner.feed_block search them. Portable, but it
  makes one pass over each block per anchor, so it is slow on big logs.
- `grep` lets grep find the candidate lines. For a regular file grep reads the file itself while
  this process reads it alongside, on the other core, only to count lines and to measure the
  line that runs across each block boundary: C-speed searches, no copy through a pipe. Stdin and
  other streams flow through this process into grep, with the same checks on the way.
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from triage.core import children
from triage.core.errors import UserError, shown
from triage.core.logscan.scanner import Scanner, shape_key

BLOCK_BYTES = 4 << 20
HEAD_BYTES = 64 << 10  # binary sniffing looks at the start of a file, as grep does
PIPE_BYTES = 1 << 20  # Linux's default limit for an unprivileged pipe; 64 KiB costs many switches
_ERE_SPECIAL = set("\\.[]()*+?{}|^$")
FIFO_WAIT_S = 3.0  # how long a named pipe may stay without a writer before it is refused


def open_input(name: str) -> tuple[str, IO[bytes]]:
    """The display name and an open binary stream for a log path, or `-` for stdin.

    Never blocks: a named pipe is opened without waiting for a writer and refused when nothing
    writes to it within FIFO_WAIT_S (a pipe from `<(command)` has its writer already); a device
    or a socket is refused outright."""
    if name == "-":
        return "<stdin>", sys.stdin.buffer
    try:
        mode = os.stat(name).st_mode
    except OSError as exc:
        raise _open_error(name, exc) from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{name}: is a directory, not a log file (pass the files in it, e.g. {name}/*.log)")
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        kind = "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise UserError(f"{name}: is {kind}, not a log file")
    try:
        if stat.S_ISFIFO(mode):
            return name, _open_pipe(name)
        return name, Path(name).open("rb")
    except OSError as exc:
        raise _open_error(name, exc) from None


def _open_pipe(name: str) -> IO[bytes]:
    import select

    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        anonymous = os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
    except OSError:
        anonymous = False
    if not anonymous and hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(int(FIFO_WAIT_S * 1000)):
            os.close(fd)
            raise UserError(
                f"{name}: is a named pipe (FIFO) and nothing wrote to it within {FIFO_WAIT_S:g} s;"
                f" pipe the output in instead: `command | triage log -`"
            )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _open_error(name: str, exc: OSError) -> UserError:
    if isinstance(exc, FileNotFoundError):
        return UserError(f"{shown(name)}: no such file")
    if isinstance(exc, PermissionError):
        return UserError(f"{shown(name)}: cannot be read (permission denied)")
    return UserError(f"{shown(name)}: cannot be read ({exc.strerror or exc})")


def choose_engine(choice: str, unanchored: tuple[int, ...]) -> str:
    """`grep` or `python` for the --engine choice (`auto` takes grep when it is on PATH)."""
    import shutil

    if choice == "python":
        return "python"
    available = shutil.which("grep") is not None and not unanchored
    if choice == "grep" and not available:
        raise UserError("--engine grep: grep is not on PATH (or a signature has no literal anchor)")
    return "grep" if available else "python"


# -- the checks both engines make --------------------------------------------------------


def sniff(name: str, head: bytes) -> None:
    """Refuse a stream whose first bytes show it is not text."""
    sample = head[:HEAD_BYTES]
    if sample.startswith(b"\x1f\x8b"):
        raise UserError(f"{name}: is gzip-compressed; run `zcat {name} | triage log -`")
    if sample.startswith((b"PK\x03\x04", b"\x7fELF", b"BZh", b"\xfd7zXZ", b"(\xb5/\xfd")):
        raise UserError(f"{name}: is a binary file (archive or executable), not a text log")
    if b"\0" in sample:
        raise UserError(f"{name}: is a binary file (it contains NUL bytes), not a text log")


def too_long(name: str, max_line: int) -> UserError:
    """The error for a line longer than the limit."""
    return UserError(
        f"{name}: a line is longer than {max_line:,} bytes; this does not look like a text log"
        " (raise --max-line-bytes if it really is one)"
    )


class LineCheck:
    """Counts the lines of a stream fed in consecutive chunks and refuses an over-long line.

    Chunks need not end at a line, but none may be longer than `max_line` bytes: then a line
    inside one chunk is never too long, and only the line running across chunks is measured, from
    each chunk's first and last newline. Every step is one C-speed search over the chunk.
    """

    def __init__(self, name: str, max_line: int) -> None:
        self.name = name
        self.max_line = max_line
        self.newlines = 0
        self.partial = 0  # bytes of the line not yet ended

    def feed(self, chunk: bytes | bytearray) -> None:
        newlines = chunk.count(b"\n")
        if newlines == 0:
            self.partial += len(chunk)
            if self.partial > self.max_line:
                raise too_long(self.name, self.max_line)
            return
        if self.partial + chunk.find(b"\n") > self.max_line:
            raise too_long(self.name, self.max_line)
        self.newlines += newlines
        self.partial = len(chunk) - 1 - chunk.rfind(b"\n")

    @property
    def lines(self) -> int:
        """Lines so far, counting an unterminated last line."""
        return self.newlines + (1 if self.partial else 0)


def _read_into(name: str, stream: IO[bytes], buffer: bytearray) -> bytes | bytearray:
    """The next chunk of `stream`, read into `buffer` (returned as is when full, else a slice)."""
    try:
        got = stream.readinto(buffer)  # type: ignore[attr-defined]
    except OSError as exc:
        raise UserError(f"{name}: read failed ({exc.strerror or exc})") from None
    return buffer if got == len(buffer) else buffer[: got or 0]


def _read_at(name: str, fd: int, buffer: bytearray, offset: int) -> bytes | bytearray:
    """The chunk of file `fd` at `offset`, leaving the file's own position alone (grep's)."""
    try:
        if hasattr(os, "preadv"):
            got = os.preadv(fd, [buffer], offset)
        else:  # pragma: no cover - platforms without preadv
            return os.pread(fd, len(buffer), offset)
    except OSError as exc:
        raise UserError(f"{name}: read failed ({exc.strerror or exc})") from None
    return buffer if got == len(buffer) else buffer[:got]


# -- the python engine --------------------------------------------------------------------


def blocks(name: str, stream: IO[bytes], max_line: int) -> Iterator[bytes]:
    """Blocks of whole lines; refuses binary input and lines longer than `max_line`.

    Reads at most `max_line` bytes at a time, so a line within one read is never too long and
    only the partial line carried between reads needs measuring: memory stays at a few blocks.
    """
    size = min(BLOCK_BYTES, max_line)
    carry = b""
    first = True
    while True:
        try:
            chunk = stream.read(size)
        except OSError as exc:
            raise UserError(f"{name}: read failed ({exc.strerror or exc})") from None
        if first:
            sniff(name, chunk)
            first = False
        if not chunk:
            if carry:
                yield carry
            return
        cut = chunk.rfind(b"\n")
        if cut == -1:
            carry += chunk
            if len(carry) > max_line:
                raise too_long(name, max_line)
            continue
        if len(carry) + chunk.find(b"\n") > max_line:
            raise too_long(name, max_line)
        yield carry + chunk[: cut + 1] if carry else chunk[: cut + 1]
        carry = chunk[cut + 1 :]


def scan_python(scanner: Scanner, source: int, name: str, stream: IO[bytes], max_line: int) -> None:
    """Feed `stream` to the scanner block by block; the scanner finds the candidate lines."""
    line = 1
    for block in blocks(name, stream, max_line):
        line += scanner.feed_block(source, block, line)


# -- the grep engine ----------------------------------------------------------------------


def ere(anchor: str) -> str:
    """An anchor as a POSIX ERE; a trailing newline (`error\\n`) becomes an end-of-line `$`."""
    if anchor.endswith("\n"):
        return "".join("\\" + c if c in _ERE_SPECIAL else c for c in anchor[:-1]) + "$"
    return "".join("\\" + c if c in _ERE_SPECIAL else c for c in anchor)


def grep_command(anchors: tuple[str, ...]) -> list[str]:
    """The grep command line that finds lines holding any anchor."""
    # -E rather than -F: in the C locale GNU grep 3.8 runs ~250 case-folded literals given as -E
    # through its DFA, twice as fast as its multi-string search for -F. LC_ALL=C (see _popen)
    # keeps -i to ASCII folding, as bytes.lower() does in the python engine. -A1: the line after
    # NCCL's `Last error:` names the cause and holds no anchor of its own (context lines come
    # back as `N-text`, and the scanner reads them only when it asked for them).
    command = ["grep", "-n", "-a", "-i", "-A1", "-E"]
    for anchor in anchors:
        command += ["-e", ere(anchor)]
    return command


def _regular_fd(stream: IO[bytes]) -> int | None:
    """The descriptor under `stream` when it is a regular file (also stdin redirected from one)."""
    try:
        fd = stream.fileno()
        return fd if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):
        return None


def scan_grep(
    scanner: Scanner, source: int, name: str, stream: IO[bytes], max_line: int, anchors: tuple[str, ...]
) -> None:
    """Let grep find the candidate lines (with their numbers) while this process checks the input."""
    buffer = bytearray(min(BLOCK_BYTES, max_line))
    fd = _regular_fd(stream)
    if fd is not None:
        # grep reads the file from its current position through the shared descriptor; this
        # process reads the same bytes with positional reads, which leave that position alone.
        start = os.lseek(fd, 0, os.SEEK_CUR)
        head = _read_at(name, fd, buffer, start)
    else:
        head = _read_into(name, stream, buffer)
    sniff(name, bytes(head[:HEAD_BYTES]))
    if not head:
        return
    scanner.keep_head(source, bytes(head[:HEAD_BYTES]))
    check = LineCheck(name, max_line)
    stop = threading.Event()
    command = grep_command(anchors)
    if fd is not None:
        proc = _popen(command, fd)

        def work() -> None:
            assert fd is not None
            chunk, offset = head, start
            while chunk and not stop.is_set():
                check.feed(chunk)
                offset += len(chunk)
                chunk = _read_at(name, fd, buffer, offset)

    else:
        proc = _popen(command, subprocess.PIPE)
        assert proc.stdin is not None
        with contextlib.suppress(AttributeError, OSError):
            import fcntl

            fcntl.fcntl(proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)

        def work() -> None:
            assert proc.stdin is not None
            chunk = head
            try:
                while chunk and not stop.is_set():
                    check.feed(chunk)
                    proc.stdin.write(chunk)
                    chunk = _read_into(name, stream, buffer)
            except BrokenPipeError:
                pass  # grep ended early; its exit status says why
            finally:
                with contextlib.suppress(OSError):
                    proc.stdin.close()

    _collect(scanner, source, name, proc, work, stop)
    scanner.scan.lines += check.lines


def _popen(command: list[str], stdin: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LC_ALL": "C"}
    try:
        return children.popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise UserError(f"grep could not be started ({exc.strerror or exc}); try --engine python") from None


def _collect(
    scanner: Scanner,
    source: int,
    name: str,
    proc: subprocess.Popen[bytes],
    work: Callable[[], None],
    stop: threading.Event,
) -> None:
    """Feed grep's output to the scanner while `work` (the checks, or the feeding) runs beside it."""
    assert proc.stdout is not None and proc.stderr is not None
    failure: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the main thread, which reports it
            failure.append(exc)
            proc.kill()

    worker = threading.Thread(target=guarded, name="triage-log-input", daemon=True)
    worker.start()
    finished = False
    try:
        for raw in proc.stdout:
            if failure:
                break
            digits = len(raw) - len(raw.lstrip(b"0123456789"))
            if digits == 0:
                continue  # the `--` between groups of lines
            number = int(raw[:digits])
            line = raw[digits + 1 :].rstrip(b"\r\n")
            if raw[digits : digits + 1] == b":":
                key = shape_key(line)
                if not scanner.repeated(source, key):
                    scanner.feed_candidate(source, number, line.decode("utf-8", "replace"), key)
            elif scanner.wants_line(source, number):
                scanner.feed_candidate(source, number, line.decode("utf-8", "replace"))
        finished = True
    finally:
        if not finished or failure:
            stop.set()
            proc.kill()
        # interrupted, the feeder may be blocked reading a stdin that never ends: do not wait on it
        worker.join(None if finished else 1.0)
        proc.stdout.close()
        message = proc.stderr.read().decode("utf-8", "replace").strip()
        proc.stderr.close()
        code = children.reap(proc, grace_s=5.0 if finished and not failure else 0.0)
    if failure:
        raise failure[0]
    if code not in (0, 1):
        why = message.splitlines()[-1] if message else f"exit status {code}"
        raise UserError(f"{name}: grep failed ({why}); try --engine python")
