"""A cheap fingerprint of the knowledge sources, to tell whether compiled.json is current.

zlib's CRC-32 over names and bytes (plus the total size) rather than hashlib, and os.path rather
than pathlib: the check runs on every `triage ask`, and those imports alone cost more than
reading every file.
"""

from __future__ import annotations

import os
import zlib

from triage.core.files import StrPath, read_regular

MAX_SOURCE_BYTES = 1 << 20  # a knowledge file is a few KB; a bigger one is a mistake or an attack

ENTRY_DIR = "entries"
TOP_FILES = ("sections.yaml", "facts.yaml", "graph.yaml", "vocabulary.yaml")
COMPILED_NAME = "compiled.json"
# Files the knowledge may have: the confidence model `ask` abstains by and the labelled reports
# compiled into the index (both written by bench/fit_confidence.py from the corpus's train split),
# and the words that say a text is about training at all (a feature of that model).
OPTIONAL_FILES = ("confidence.yaml", "reports.yaml", "domain.yaml", "signature_evidence.yaml")


def source_files(root: StrPath) -> list[str]:
    """Every file the knowledge base is built from, in a stable order."""
    root = os.fspath(root)
    entries = os.path.join(root, ENTRY_DIR)
    try:
        names = sorted(n for n in os.listdir(entries) if n.endswith(".yaml"))
    except OSError:
        names = []
    return [*(os.path.join(root, n) for n in TOP_FILES), *(os.path.join(entries, n) for n in names)]


def read_source(path: StrPath, limit: int = MAX_SOURCE_BYTES) -> bytes:
    """A knowledge file's bytes; a FIFO, a device (/dev/zero) or a huge file is an OSError."""
    return read_regular(path, limit)


def fingerprint(root: StrPath) -> str:
    """A cheap fingerprint of every source file (CRC-32 and total size)."""
    crc = 0
    total = 0
    optional = [os.path.join(os.fspath(root), n) for n in OPTIONAL_FILES]
    for path in [*source_files(root), *(p for p in optional if os.path.isfile(p))]:
        crc = zlib.crc32(os.path.basename(path).encode() + b"\0", crc)
        try:
            data = read_source(path)
        except OSError:
            data = b"<unreadable>"
        crc = zlib.crc32(data + b"\0", crc)
        total += len(data)
    return f"{crc:08x}-{total}"
