"""mistake: an HF-style hand-written loop computes its stop from its own data: `max_steps =
epochs * len(train_loader)`, with each rank's list of examples filtered by length before sharding,
so rank 1 has fewer batches, leaves the loop, saves nothing and returns cleanly (exit status 0)
while rank 0 goes on into its next DDP all-reduce (timeout 15 s). Started with mp.spawn.
label: D9
alternates: D22
first_rank: 0
launch: python eval/runs/scripts/spawn_rank_returns_early.py
source: https://discuss.pytorch.org/t/ddp-one-process-finishes-early-other-hangs/
written: session 12, unseen
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def examples(rank, world):
    g = torch.Generator().manual_seed(7)
    lengths = torch.randint(4, 200, (96,), generator=g).tolist()
    mine = [n for i, n in enumerate(lengths) if i % world == rank]
    return [n for n in mine if n <= 160]  # drop over-long examples


def train(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=15))
    data = examples(rank, world)
    batches = [data[i : i + 4] for i in range(0, len(data), 4)]
    epochs = 1
    max_steps = epochs * len(batches)
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    global_step = 0
    while True:
        for batch in batches:
            x = torch.randn(len(batch), 8)
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            global_step += 1
            if global_step >= max_steps:
                break
        if global_step >= max_steps:
            break
    print(f"[rank {rank}] training finished after {global_step} steps", flush=True)


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
