"""mistake: the worker is declared `def train(world_size, rank)` but mp.spawn passes the process
index first, `train(i, *args)`, with `args=(world_size,)`; so each worker's "world_size" is its index
(0 or 1) and its "rank" is 2, and init_process_group gets a rank outside the world.
label: none
alternates: D1
first_rank: none
launch: python eval/runs/scripts/spawn_rank_world_swapped.py
source: https://discuss.pytorch.org/t/mp-spawn-rank-argument-order/
written: session 11c, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(world_size, rank):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29555")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    print(f"rank {rank}/{world_size}: {t.item()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
