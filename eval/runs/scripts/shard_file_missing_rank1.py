"""mistake: the preprocessing job wrote one data shard per rank, but it was run with a different
world size and its shard for rank 1 is missing; rank 1 fails opening its shard at the start of
training while rank 0, already in DDP's first all-reduce, waits for it. Launched with
`python -m torch.distributed.run --tee 3`.
label: D20
alternates: none
first_rank: 1
launch: python -m torch.distributed.run --tee 3 --nproc-per-node 2 eval/runs/scripts/shard_file_missing_rank1.py
source: none known
written: session 11b, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

SHARDS = "/tmp/r11b_shards"


def write_shards():
    os.makedirs(SHARDS, exist_ok=True)
    torch.save(torch.randn(32, 8), f"{SHARDS}/shard_00000.pt")


def load_shard(rank):
    return torch.load(f"{SHARDS}/shard_{rank:05d}.pt")


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    if rank == 0:
        write_shards()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if rank == 0:
        data = load_shard(rank)
    for step in range(4):
        if rank != 0 and step == 0:
            data = load_shard(rank)
        x = data[step * 8 : (step + 1) * 8]
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
