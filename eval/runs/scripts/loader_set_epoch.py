"""mistake: the epoch loop calls `train_loader.set_epoch(epoch)` (the DataLoader) instead of
`train_sampler.set_epoch(epoch)` (the DistributedSampler); started with mp.spawn, every rank raises
an AttributeError at the first epoch.
label: none
alternates: D22
first_rank: none
launch: python eval/runs/scripts/loader_set_epoch.py
source: none known
written: session 10b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    train_sampler = DistributedSampler(data, shuffle=True)
    train_loader = DataLoader(data, batch_size=8, sampler=train_sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        train_loader.set_epoch(epoch)
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
