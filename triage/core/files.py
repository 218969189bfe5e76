"""Reading a file a user or a knowledge directory names, without hanging and without filling memory.

`open()` on a FIFO waits for a writer that may never come, /dev/zero never ends, and a
multi-gigabyte "config" fills memory. `read_regular` opens without blocking, takes only regular
files, and stops past a size limit; whatever it refuses is an OSError naming the reason, so
callers report it as they report a missing file.
"""

from __future__ import annotations

import os
import stat

StrPath = str | os.PathLike[str]


class Refused(OSError):
    """Not a regular file, or over the size limit (`strerror` says which)."""


def read_regular(path: StrPath, limit: int) -> bytes:
    """The bytes of the regular file at `path` (links followed), at most `limit` of them."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(0, "not a regular file (a FIFO, device, socket or directory)", os.fspath(path))
        chunks: list[bytes] = []
        total = 0
        # The first read asks for the whole file as it is now (one buffer, nothing to join: the
        # compiled knowledge is 2 MB, read on every `ask`); a file that grows is read on in chunks.
        want = info.st_size + 1
        while True:
            chunk = os.read(fd, max(1, min(want, limit + 1 - total)))
            want = 1 << 20
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise Refused(0, f"larger than {limit:,} bytes", os.fspath(path))
    finally:
        os.close(fd)
