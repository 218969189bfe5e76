"""mistake: the classifier head is an nn.LazyLinear (its input size found on the first batch), and
the model is wrapped in DDP before any batch went through it. Started with mp.spawn.
label: none
first_rank: none
launch: python eval/runs/scripts/lazy_module_ddp.py
source: none known
written: session 10, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29513")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = nn.Sequential(nn.Conv1d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(5))
    model = DDP(model)
    out = model(torch.randn(4, 3, 20))
    print(f"rank {rank} out {tuple(out.shape)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
