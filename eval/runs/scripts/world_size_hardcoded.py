"""mistake: the world size is hard-coded in init_process_group (`world_size=4`, from the 4-GPU
machine the script was written on) while the job is started with `torchrun --nproc-per-node 2`;
both ranks wait for two more that never come (the script sets a 20 s timeout to fail fast).
label: D1
alternates: P1
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/world_size_hardcoded.py
source: none known
written: session 9b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist

WORLD_SIZE = 4


def main():
    rank = int(os.environ["RANK"])
    dist.init_process_group(
        backend="gloo", rank=rank, world_size=WORLD_SIZE, timeout=timedelta(seconds=20)
    )
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {rank}: {t.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
