"""mistake: gradients are averaged by hand (`for p in model.parameters(): dist.all_reduce(p.grad)`)
instead of DDP, and the pretrained embedding is frozen, so its .grad is None and the all_reduce gets
None. Started with mp.spawn.
label: none
alternates: D8
first_rank: none
launch: python eval/runs/scripts/manual_grad_avg_frozen.py
source: none known
written: session 10, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(100, 16), nn.Flatten(), nn.Linear(16 * 6, 2))
    model[0].weight.requires_grad_(False)  # keep the pretrained embedding fixed
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.randint(0, 100, (8, 6))
    loss = nn.functional.cross_entropy(model(ids), torch.randint(0, 2, (8,)))
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world_size
    opt.step()
    print(f"rank {rank} loss {loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
