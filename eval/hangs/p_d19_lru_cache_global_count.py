"""The global sample count for the epoch summary is memoised with `functools.lru_cache`, keyed by
the rank's own count, "to save a collective when nothing changed".

Hang class: a cached function with a collective inside; a rank whose argument repeats gets a cache
hit and skips the all_reduce the others issue.
Label: D19
Odd ranks: 0
Launch: torchrun 3
Held out: session 11

Each epoch drops the samples whose text fails a quality check (a random check seeded by epoch and
rank, as augmentation is); rank 0's shard has no noisy samples, so it keeps the same count every
epoch. At the end of epoch 1, `global_samples(kept)` is a cache hit on rank 0 and it goes straight
to the end-of-epoch barrier, while ranks 1 and 2 (whose counts changed) wait in the all_reduce
inside `global_samples`.
"""

import functools
import random

import torch
import torch.distributed as dist
from torch import nn


@functools.lru_cache(maxsize=32)
def global_samples(local: int) -> int:
    count = torch.tensor([local], dtype=torch.float64)
    dist.all_reduce(count)
    return int(count.item())


def keep(sample: int, rank: int, epoch: int) -> bool:
    noisy = rank != 0 and sample % 5 == 0  # ranks 1 and 2 read the scraped part of the corpus
    return not noisy or random.Random(epoch * 1000 + rank * 100_000 + sample).random() > 0.5


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    shard = range(rank * 200, rank * 200 + 200)
    for epoch in range(5):
        kept = [s for s in shard if keep(s, rank, epoch)]
        x = torch.randn(16, 6)
        for _ in range(10):  # the same number of steps everywhere: batches are resampled from `kept`
            loss = model(x).pow(2).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        total = global_samples(len(kept))
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch}: trained on {total} samples", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
