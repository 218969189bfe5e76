"""mistake: a script that starts its own workers with mp.spawn (nprocs=2, rank = the spawn index,
env:// init) is launched with `torchrun --nproc-per-node 2` as the cluster's job template does;
each of torchrun's two workers spawns two more processes, so four processes claim ranks 0 and 1 of
a world of 2 in the launcher's rendezvous.
label: D1
alternates: none
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/spawn_under_torchrun.py
source: none known
written: session 11, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=20))
    model = torch.nn.Linear(8, 1)
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    for step in range(3):
        loss = model(torch.randn(4, 8)).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world_size
        print(f"[rank {rank}] step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
