"""mistake: the data-validation helper ends the process with `os._exit(1)` when it finds a corrupt
shard (it was written for a single-process tool, where that was fine); rank 1's shard is corrupt, so
rank 1 vanishes without a traceback while rank 0 waits in the all-reduce. Output goes to per-rank
files (`--redirects 3 --log-dir`).
label: D20
first_rank: 1
launch: rm -rf /tmp/r10_logs && torchrun --redirects 3 --log-dir /tmp/r10_logs --nproc-per-node 2 eval/runs/scripts/rank_os_exit.py
source: none known
written: session 10, unseen
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def validate_shard(rows):
    bad = [i for i, r in enumerate(rows) if r != r]
    if bad:
        sys.stderr.write(f"corrupt rows {bad[:5]} in shard, aborting\n")
        os._exit(1)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    for step in range(5):
        rows = [float(i) for i in range(10)]
        if rank == 1 and step == 2:
            rows[4] = float("nan")
        validate_shard(rows)
        grad = torch.tensor(rows)
        dist.all_reduce(grad)
        print(f"rank {rank} step {step} {grad.sum().item():.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
