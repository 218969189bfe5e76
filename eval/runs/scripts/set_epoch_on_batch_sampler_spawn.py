"""mistake: the loader was switched to a hand-built `BatchSampler(DistributedSampler(...))` (for a
custom batch size schedule), and the epoch loop kept `loader.batch_sampler.set_epoch(epoch)`; a
BatchSampler has no set_epoch, so every process fails at the first epoch (mp.spawn, no DDP: the
gradients are averaged by hand).
label: none
alternates: D22
first_rank: none
launch: python eval/runs/scripts/set_epoch_on_batch_sampler_spawn.py
source: none known
written: session 13b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    ds = TensorDataset(torch.randn(96, 8), torch.randn(96, 1))
    batches = BatchSampler(DistributedSampler(ds, shuffle=True), batch_size=16, drop_last=False)
    loader = DataLoader(ds, batch_sampler=batches)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        loader.batch_sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world_size
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2, join=True)
