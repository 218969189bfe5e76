"""mistake: the process group is created with timeout=timedelta(seconds=5) (copied from a unit
test), and rank 3 spends longer than that preprocessing its shard before the barrier.
label: MN3
first_rank: none
launch: torchrun --nproc-per-node 4 eval/runs/scripts/barrier_slow_rank.py
source: none known
"""

import time
from datetime import timedelta

import torch.distributed as dist


def preprocess(rank):
    n = 0
    deadline = time.time() + (30 if rank == 3 else 0.5)
    while time.time() < deadline:
        n += 1
        time.sleep(0.01)
    return n


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=5))
    rank = dist.get_rank()
    preprocess(rank)
    print(f"rank {rank} preprocessing done", flush=True)
    dist.barrier()
    print(f"rank {rank} past barrier", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
