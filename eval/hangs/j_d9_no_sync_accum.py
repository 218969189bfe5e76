"""Gradient accumulation under DDP's no_sync, with the number of micro-batches taken from each rank's shard.

Hang class: ranks run different numbers of optimizer steps; the rank with the shorter shard finishes
the epoch and waits in the epoch-end reduction while the others wait in DDP's gradient all-reduce.
Label: D9
Odd ranks: 1
Launch: torchrun 2
Held out: session 9

Each rank reads its own list of documents (split by file, not by a DistributedSampler) and
accumulates gradients over `accum` micro-batches inside `model.no_sync()`, syncing on the last one.
Rank 1's shard has 4 fewer documents, so it makes one optimizer step fewer per epoch: it leaves the
loop and waits in the barrier before the epoch's validation, while rank 0 waits in the gradient
all-reduce of its last synced backward.
"""

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_shard(rank: int) -> list[torch.Tensor]:
    sizes = {0: 64, 1: 60}  # documents in this rank's files
    g = torch.Generator().manual_seed(rank)
    return [torch.randn(4, 16, generator=g) for _ in range(sizes[rank])]


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accum = 8
    for epoch in range(1000):
        micro = read_shard(rank)
        total = torch.zeros(1)
        for i, x in enumerate(micro):
            sync = (i + 1) % accum == 0
            ctx = contextlib.nullcontext() if sync else model.no_sync()
            with ctx:
                loss = model(x).pow(2).mean() / accum
                loss.backward()
            total += loss.detach()
            if sync:
                opt.step()
                opt.zero_grad()
        dist.barrier()  # every rank done with the epoch before validation
        if rank == 0:
            print(f"epoch {epoch} loss {total.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
