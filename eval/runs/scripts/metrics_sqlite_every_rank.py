"""mistake: the experiment tracker written by hand keeps metrics in one SQLite file under the
output directory; every rank opens it and runs `CREATE TABLE metrics` at start-up (no rank-0
guard), so the second rank to get there fails with "table metrics already exists".
label: D23
first_rank: none
launch: rm -rf /tmp/s12_runs && torchrun --nproc-per-node 2 eval/runs/scripts/metrics_sqlite_every_rank.py
source: none known
written: session 12, unseen
"""

import os
import sqlite3
import time

import torch
import torch.distributed as dist

OUT = "/tmp/s12_runs/exp1"


class Tracker:
    def __init__(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        self.db = sqlite3.connect(os.path.join(out_dir, "metrics.db"), timeout=30)
        self.db.execute("CREATE TABLE metrics (step INTEGER, name TEXT, value REAL)")
        self.db.commit()

    def log(self, step, **values):
        for k, v in values.items():
            self.db.execute("INSERT INTO metrics VALUES (?, ?, ?)", (step, k, v))
        self.db.commit()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    time.sleep(0.2 * rank)
    tracker = Tracker(OUT)
    for step in range(3):
        loss = torch.rand(1)
        dist.all_reduce(loss)
        tracker.log(step, loss=loss.item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
