"""mistake: a streaming dataset shards its records across ranks with
`itertools.islice(records, rank, None, world_size)`; 9 records over 2 ranks leave rank 0 with three
batches of 2 and rank 1 with two, so rank 1 leaves the loop and waits in the end-of-epoch barrier
while rank 0 is still in its third DDP step (mp.spawn, 15 s timeout).
label: D9
alternates: D22
first_rank: none
launch: python eval/runs/scripts/stream_islice_uneven_spawn.py
source: none known
written: session 13b, unseen
"""

import itertools
import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class Records(IterableDataset):
    def __init__(self, n, rank, world_size):
        self.n, self.rank, self.world_size = n, rank, world_size

    def records(self):
        for i in range(self.n):
            yield torch.full((8,), i / self.n), torch.tensor([float(i % 3)])

    def __iter__(self):
        return itertools.islice(self.records(), self.rank, None, self.world_size)


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=15))
    loader = DataLoader(Records(9, rank, world_size), batch_size=2)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2, join=True)
