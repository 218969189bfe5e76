"""mistake: nprocs for mp.spawn comes from os.cpu_count()-based "number of workers" (4 here) while
world_size passed to init_process_group is the configured 2: ranks 2 and 3 are outside the world.
label: D1
first_rank: none
launch: python eval/runs/scripts/spawn_nprocs_vs_world.py
source: none known
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

CONFIG = {"world_size": 2, "workers": 4}


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=20))
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    print(f"rank {rank}: sum {x.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(CONFIG["world_size"],), nprocs=CONFIG["workers"])
