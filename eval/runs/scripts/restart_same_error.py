"""mistake: the job is launched with `torchrun --max-restarts 1` "so a crash restarts it", but
rank 1's failure is a deterministic bug (its shard's label map lacks a class), so the restarted
worker group hits the same KeyError at the same step and the launcher gives up after the restart.
label: D20
alternates: MN5
first_rank: 1
launch: torchrun --max-restarts 1 --nproc-per-node 2 eval/runs/scripts/restart_same_error.py
source: none known
written: session 10b, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

LABELS = {"cat": 0, "dog": 1, "bird": 2}


def shard(rank):
    names = ["cat", "dog", "bird", "dog"]
    if rank == 1:
        names = ["dog", "cat", "fish", "bird"]
    return names


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = DDP(nn.Linear(5, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step, name in enumerate(shard(rank)):
        y = torch.tensor([LABELS[name]])
        loss = nn.functional.cross_entropy(model(torch.randn(1, 5)), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
