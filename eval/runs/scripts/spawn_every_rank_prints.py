"""mistake: an mp.spawn training loop where every process prints the epoch summary and runs the
validation: the console shows each line once per process.
label: D23
first_rank: none
launch: python eval/runs/scripts/spawn_every_rank_prints.py
written: after the log engine was read (session 8, second batch)
source: none known
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def run(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(6, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        torch.manual_seed(epoch)
        loss = model(torch.randn(16, 6)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"Epoch {epoch + 1}/3 | train loss {loss.item():.4f}", flush=True)
        print(f"Validation after epoch {epoch + 1}: accuracy 0.{50 + epoch}", flush=True)
    print("Saving model to ./checkpoints/final.pt", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29531")
    mp.spawn(run, args=(3,), nprocs=3)
