"""mistake: the mp.spawn call sits at module level, with no `if __name__ == "__main__":` guard;
the spawn start method re-imports the script in every child.
label: E14
first_rank: none
launch: python eval/runs/scripts/spawn_no_main_guard.py
source: https://github.com/Lightning-AI/pytorch-lightning/issues/16900
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.ones(2) * rank
    dist.all_reduce(t)
    print(rank, t)
    dist.destroy_process_group()


world_size = 2
mp.spawn(worker, args=(world_size,), nprocs=world_size)
