"""A Slurm training script run by hand with `python train.py` on the allocated node.

Hang class: no launcher (no srun); rank and world come from Slurm variables that fall back to
the script's defaults.
Label: D1
Odd ranks: 1
Launch: python 1 world 2
Held out: session 9b

The script reads SLURM_PROCID and SLURM_NTASKS (default 0 and 2, the job's usual size); run
inside `salloc` without `srun`, no task variables are set, so the only process is rank 0 of 2
and waits in `init_process_group` for rank 1.
"""

import os

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    rank = int(os.environ.get("SLURM_PROCID", 0))
    world = int(os.environ.get("SLURM_NTASKS", 2))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29400")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(200):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
