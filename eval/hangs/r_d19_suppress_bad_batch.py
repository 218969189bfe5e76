"""A training loop wraps the per-batch auxiliary statistics in `contextlib.suppress(Exception)` so
that "a bad batch never kills a week-long run".

Hang class: a swallowed exception on one rank skips the rest of its step, so that rank issues one
collective fewer and goes on to the next step's first collective.
Label: D19
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 11c

Each step broadcasts the data-order seed, runs forward/backward, then under the `suppress` block
computes token statistics and all_reduces the gradients. Rank 1's batch at step 5 has an empty
mask: `statistics()` raises `ZeroDivisionError` before the gradient all_reduce, the `suppress`
swallows it and rank 1 waits in the next step's `broadcast`; rank 0 waits in the `all_reduce`.
"""

import contextlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def statistics(mask: torch.Tensor) -> dict[str, float]:
    kept = int(mask.sum())
    return {"kept_frac": kept / mask.numel(), "inv_kept": 1.0 / kept}


def sync_grads(model: nn.Module, world: int) -> None:
    flat = torch.cat([p.grad.flatten() for p in model.parameters()])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


def worker(rank: int, world: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "12355"))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(12, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    log: list[dict[str, float]] = []
    for step in range(500):
        seed = torch.tensor([step])
        dist.broadcast(seed, src=0)
        torch.manual_seed(int(seed) * 31 + rank)
        x = torch.randn(8, 12)
        mask = torch.rand(8) > 0.2
        if rank == 1 and step == 5:
            mask[:] = False  # every token padding in this batch
        loss = model(x[mask]).pow(2).mean() if mask.any() else model(x).sum() * 0
        opt.zero_grad()
        loss.backward()
        with contextlib.suppress(Exception):
            log.append(statistics(mask))
            sync_grads(model, world)
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2, join=True)
