"""Steps per epoch computed from each rank's own shard, batches drawn with `next()` from a
cycling iterator.

Hang class: ranks run different numbers of steps (the count comes from a per-rank length).
Label: D9
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 9c

The files are split round-robin by hand (10 files over 3 ranks: 4, 3, 3) and each rank sets
`steps_per_epoch = ceil(len(my_samples) / batch)` from its own part, then draws that many batches
from an endless iterator. Rank 2's part is shortest (its files are the small ones): it finishes
the epoch first and waits in the barrier before the validation, while ranks 0 and 1 wait in the
next step's gradient all-reduce.
"""

import itertools
import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

FILE_SIZES = [96, 96, 40, 96, 96, 40, 96, 96, 40, 96]  # samples per file
BATCH = 16


def load_samples(files: list[int]) -> list[torch.Tensor]:
    return [torch.randn(6) for f in files for _ in range(FILE_SIZES[f])]


def worker(rank: int, world: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    my_files = list(range(len(FILE_SIZES)))[rank::world]
    samples = load_samples(my_files)
    steps_per_epoch = math.ceil(len(samples) / BATCH)
    batches = itertools.cycle(torch.stack(samples[i : i + BATCH]) for i in range(0, len(samples), BATCH))
    model = DDP(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(10):
        for step in range(steps_per_epoch):
            x = next(batches)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        dist.barrier()  # everyone done before validation
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3)
