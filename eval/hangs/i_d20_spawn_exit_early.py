"""A worker that has nothing left to resume exits cleanly with sys.exit(0); started with mp.spawn.

Hang class: one rank is gone (exit code 0, no traceback) and the others wait for it.
Label: D20
Odd ranks: 1
Launch: mp.spawn 3 gone
Held out: written in session 8 before the engine was changed, measured once

Each worker resumes from its own progress record; rank 1's says its shard is done, so it prints
"nothing to do" and calls `sys.exit(0)` before joining the group. mp.spawn sees a clean exit and
keeps waiting for the others; ranks 0 and 2 wait in `init_process_group` for rank 1. (Had rank 1
exited after joining, gloo would have failed the others at once with a closed connection.)
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def progress(rank: int) -> int:
    done = {0: 120, 1: 400, 2: 80}  # samples each rank had processed when the last run stopped
    return done[rank]


def worker(rank: int, world: int, total: int) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", os.environ.get("HANG_MASTER_PORT", "29512"))
    start = progress(rank)
    if start >= total:
        print(f"[rank {rank}] shard already done ({start}/{total}), nothing to do", flush=True)
        sys.exit(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(start, total, 8):
        loss = model(torch.randn(8, 10)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(3, 400), nprocs=3, join=True)
