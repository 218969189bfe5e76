"""mistake: the dataset drops samples that fail a quality check, and the check reads files each
rank caches on its own; from the second epoch on, rank 1's cache marks a few more samples bad, so
its DistributedSampler has fewer samples than rank 0's and the ranks run different numbers of
steps; rank 0 is left waiting in DDP's all-reduce (init timeout 10 s). Started with mp.spawn.
label: D22
alternates: D9
first_rank: none
launch: python eval/runs/scripts/sampler_filter_epoch_rank1.py
source: none known
written: session 11b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def build_dataset(rank, epoch):
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(0))
    keep = torch.ones(64, dtype=torch.bool)
    if rank == 1 and epoch > 0:
        keep[::5] = False
    return TensorDataset(x[keep])


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=10))
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        ds = build_dataset(rank, epoch)
        sampler = DistributedSampler(ds)
        sampler.set_epoch(epoch)
        steps = 0
        for (x,) in DataLoader(ds, batch_size=4, sampler=sampler):
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            steps += 1
        print(f"rank {rank} epoch {epoch}: {steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
