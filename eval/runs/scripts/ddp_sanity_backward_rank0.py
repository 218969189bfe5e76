"""mistake: before training, rank 0 alone runs a "sanity check" forward and backward through the
DDP-wrapped model on one fixed batch (inside `if rank == 0:`); that backward starts DDP's gradient
all-reduce, which the other rank never joins (process group timeout 15 s).
label: D21
first_rank: none
launch: python -m torch.distributed.run --nproc-per-node 2 eval/runs/scripts/ddp_sanity_backward_rank0.py
source: none known
written: session 12b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def sanity_check(model):
    x = torch.randn(2, 16)
    out = model(x)
    out.sum().backward()
    model.zero_grad()
    print("sanity check passed")


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    if rank == 0:
        sanity_check(model)
    opt = torch.optim.Adam(model.parameters())
    for step in range(5):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
