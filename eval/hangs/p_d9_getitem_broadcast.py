"""Multi-scale training: the dataset's `__getitem__` broadcasts rank 0's choice of crop size so
every rank's sample has the same shape; each rank's sampler keeps only its own usable images.

Hang class: ranks run different numbers of batches; the collective is hidden in the dataset's
`__getitem__`, reached from the DataLoader in the main process (num_workers=0).
Label: D9
Odd ranks: 2
Launch: mp.spawn 3
Held out: session 11

`ShardSampler` gives each rank every third image and drops the ones too small for the largest
crop; rank 2's third of the folder holds most of the thumbnails, so it has fewer batches
(drop_last keeps the batches whole). Rank 2 runs out, leaves the epoch and waits in the barrier
before the validation pass; ranks 0 and 1 wait in the broadcast inside `__getitem__` of their next
batch.
"""

import os
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

SIZES = [(64 if i % 3 != 2 or i % 4 == 0 else 20) for i in range(600)]  # image side, pixels
CROPS = (16, 24, 32)


class Images(Dataset[torch.Tensor]):
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.g = torch.Generator().manual_seed(rank)

    def __len__(self) -> int:
        return len(SIZES)

    def __getitem__(self, index: int) -> torch.Tensor:
        crop = torch.tensor([CROPS[int(torch.randint(3, (1,), generator=self.g))]])
        dist.broadcast(crop, src=0)  # the same scale on every rank for this sample
        side = int(crop)
        return torch.randn(3, side, side)[:, :16, :16]


class ShardSampler(Sampler[int]):
    def __init__(self, rank: int, world: int) -> None:
        self.indices = [i for i in range(rank, len(SIZES), world) if SIZES[i] >= max(CROPS)]

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29513"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    loader = DataLoader(Images(rank), batch_size=4, sampler=ShardSampler(rank, world), drop_last=True)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        for images in loader:
            loss = model(images).logsumexp(dim=1).mean()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
            opt.zero_grad()
        dist.barrier()  # all ranks done before validation
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3,), nprocs=3, join=True)
