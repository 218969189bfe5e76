"""mistake: mp.spawn(train, args=(world_size), ...): the parentheses do not make a tuple.
label: none
alternates: E14
first_rank: none
launch: python eval/runs/scripts/spawn_args_not_tuple.py
source: none known
"""

import os

import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    print("rank", rank, "ready")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size), nprocs=world_size, join=True)
