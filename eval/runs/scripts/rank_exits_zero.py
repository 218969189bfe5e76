"""mistake: a rank whose shard is exhausted calls sys.exit(0) ("nothing left to do") in the middle
of the epoch, while the other rank goes on into the next all-reduce.
label: D9
alternates: D20
note: rank 1 leaves with exit status 0; rank 0 is the rank that fails (the convention of triage/repro: the rank with the extra batch fails)
first_rank: 0
launch: torchrun --nproc-per-node 2 eval/runs/scripts/rank_exits_zero.py
source: none known
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=20))
    rank = dist.get_rank()
    n_batches = 6 if rank == 0 else 3
    for step in range(6):
        if step >= n_batches:
            print(f"rank {rank}: no more data, exiting", flush=True)
            sys.exit(0)
        grad = torch.randn(1000)
        dist.all_reduce(grad)
        print(f"rank {rank} step {step}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
