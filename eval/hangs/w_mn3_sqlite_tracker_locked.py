"""A small experiment tracker on an SQLite file on the shared disk (`runs.db`), used by every rank
to record its own throughput. Rank 0 opens a transaction for the run's row at start-up
("BEGIN IMMEDIATE" so the run id is reserved), meaning to commit once the first step is logged,
and goes on to the barrier before training. SQLite's `timeout=` is set to an hour "because the
shared disk is slow".

Hang class: a rank stuck outside any collective in the user's own I/O (a database lock another
rank holds while it waits in a barrier), hidden behind the collective timeout.
Label: MN3
Odd ranks: 1
Launch: python 2
Held out: session 12c

Rank 0 holds the write lock and waits in the barrier; rank 1 waits in `execute` for the lock
(SQLite's busy handler sleeps and retries for up to an hour).
"""

import os
import sqlite3
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def open_tracker(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=3600, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS runs (rank INTEGER, key TEXT, value REAL)")
    return db


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    path = os.path.join(tempfile.gettempdir(), f"w_runs_{os.environ['MASTER_PORT']}.db")
    if rank == 0:
        db = open_tracker(path)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO runs VALUES (0, 'started', 1.0)")
    dist.barrier()  # the table exists before the others open it
    if rank != 0:
        db = open_tracker(path)
        db.execute("INSERT INTO runs VALUES (?, 'started', 1.0)", (rank,))
    dist.barrier()
    model = nn.Linear(8, 8)
    for step in range(100):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        db.execute("INSERT INTO runs VALUES (?, 'loss', ?)", (rank, float(loss)))
    if rank == 0:
        db.execute("COMMIT")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
