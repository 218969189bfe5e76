"""mistake: rank 2 is still building its data index when the others reach the start-of-training
sync, which the author wrote with monitored_barrier (to find hangs) and a 5 s timeout.
label: MN3
alternates: D19
first_rank: 0
launch: torchrun --nproc-per-node 3 eval/runs/scripts/monitored_barrier_missing.py
source: none known
"""

import time
from datetime import timedelta

import torch.distributed as dist


def build_index(rank):
    if rank == 2:
        time.sleep(40)  # a slow shared filesystem on this rank
    return list(range(100))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    index = build_index(rank)
    dist.monitored_barrier(timeout=timedelta(seconds=5))
    print(rank, "starting training on", len(index), "samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
