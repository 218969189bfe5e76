"""mistake: an mp.spawn script hard-codes `backend="nccl"` (from a GPU recipe) and is run on a
CPU-only machine with the CPU wheel of torch; every worker fails creating the process group.
label: E9
alternates: E2
first_rank: none
launch: python eval/runs/scripts/nccl_backend_cpu_host.py
source: none known
written: session 9b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def train(rank, world_size):
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 4))
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "12355")
    world_size = 2
    mp.spawn(train, args=(world_size,), nprocs=world_size, join=True)
