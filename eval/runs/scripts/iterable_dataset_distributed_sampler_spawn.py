"""mistake: the dataset was changed to a streaming `IterableDataset` (it reads lines from a generator),
but the loader code still builds `DistributedSampler(dataset)` for it; the sampler needs a length, and every
worker fails building the loader (mp.spawn).
label: none
alternates: D22
first_rank: none
launch: python eval/runs/scripts/iterable_dataset_distributed_sampler_spawn.py
source: none known
written: session 13, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset


class LineStream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            yield torch.full((8,), float(i % 7)), torch.tensor(i % 2)


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29514")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dataset = LineStream(64)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    model = DDP(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
