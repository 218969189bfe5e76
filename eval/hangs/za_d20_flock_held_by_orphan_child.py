"""Rank 0 builds the tokenised cache on the shared disk under an exclusive `fcntl.flock` on
`cache.lock`; the other ranks take the same lock shared and poll until the cache is complete. While
it holds the lock, rank 0 forks a small progress reporter (`multiprocessing`, fork context, daemon)
that writes a heartbeat file for the cluster dashboard. The builder's fast path reads record
headers through `ctypes` at offsets from the shard's index; one index entry is garbage (a truncated
shard) and rank 0 dies of a segmentation fault, with no Python traceback and no exit handlers, so
its daemon child is never terminated. A `flock` belongs to the open file, which the forked child
shares: the lock stays held by the orphaned reporter, and rank 1 waits in `flock` for ever. Rank 1
is in no collective, so it never learns that rank 0 is gone; the launcher is a shell loop.

Hang class: one rank crashed and the survivor waits for it (here on a file lock the dead rank's
child still holds) rather than in a collective.
Label: D20
Odd ranks: 0
Launch: python 2 gone
Held out: session 13c

Rank 0 is gone (SIGSEGV); its forked reporter sleeps in its heartbeat loop holding the lock;
rank 1 waits in `fcntl.flock(fd, LOCK_SH)` in `wait_for_cache()`.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import logging
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

log = logging.getLogger("cache")
CACHE = Path(os.environ.get("CACHE_DIR") or tempfile.gettempdir()) / f"tokcache_{os.getppid()}"


def heartbeat(path: Path, every: float) -> None:
    while True:
        path.write_text(json.dumps({"t": time.time(), "stage": "tokenising"}))
        time.sleep(every)


def read_headers(buf: bytes, index: list[int]) -> list[int]:
    base = ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value or 0
    lengths = []
    for offset in index:
        lengths.append(int.from_bytes(ctypes.string_at(base + offset, 4), "little"))
    return lengths


def build_cache() -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reporter = mp.get_context("fork").Process(
            target=heartbeat, args=(CACHE / "heartbeat.json", 30.0), daemon=True
        )
        reporter.start()
        records = b"".join(len(r).to_bytes(4, "little") + r for r in [b"hello world"] * 64)
        index = [i * 15 for i in range(64)]
        index[40] = 0x7FFF_0000_0000  # the truncated shard's index: garbage past its end
        lengths = read_headers(records, index)
        (CACHE / "tokens.json").write_text(json.dumps({"lengths": lengths}))
        reporter.terminate()


def wait_for_cache() -> dict:
    CACHE.mkdir(parents=True, exist_ok=True)
    while True:
        with open(CACHE / "cache.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
            done = CACHE / "tokens.json"
            if done.exists():
                return json.loads(done.read_text())
        time.sleep(0.5)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format=f"[rank{rank}] %(message)s")
    dist.barrier()
    if rank == 0:
        build_cache()
    else:
        time.sleep(1.0)  # let the builder take the lock first
    cache = wait_for_cache()
    log.info("cache ready: %d records", len(cache["lengths"]))
    model = nn.Linear(8, 1)
    for _ in range(10):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
