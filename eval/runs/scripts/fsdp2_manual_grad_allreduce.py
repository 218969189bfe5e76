"""mistake: a training loop that used to average gradients by hand (`for p in model.parameters():
dist.all_reduce(p.grad); p.grad /= world`) was moved to FSDP2's `fully_shard`, and the manual averaging was
kept; the gradients are now DTensors (already reduce-scattered), handed to a plain c10d all_reduce.
label: E6
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/fsdp2_manual_grad_allreduce.py
source: none known
written: session 13, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import fully_shard


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        loss = model(torch.randn(8, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
