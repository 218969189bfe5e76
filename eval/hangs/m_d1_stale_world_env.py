"""A script that turns distributed on when WORLD_SIZE is set, run with plain `python` in a shell
where an earlier session left `export WORLD_SIZE=2`.

Hang class: no launcher; the rank variables come from a stale shell environment.
Label: D1
Odd ranks: 1
Launch: python 1 world 2
Held out: session 9c

The script picks single-process or distributed by `int(os.environ.get("WORLD_SIZE", 1)) > 1`.
The user meant a one-process debugging run, but the shell still exports WORLD_SIZE=2 (and RANK,
MASTER_ADDR, MASTER_PORT) from a by-hand launch earlier; the one process becomes rank 0 of 2 and
waits in `init_process_group` for rank 1.
"""

import os

import torch
import torch.distributed as dist
from torch import nn


def setup() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo", init_method="env://")
        return dist.get_rank(), world
    return 0, 1


def main() -> None:
    rank, world = setup()
    model = nn.Linear(12, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        loss = (model(torch.randn(16, 12)) - 1).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if world > 1:
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        opt.step()
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
