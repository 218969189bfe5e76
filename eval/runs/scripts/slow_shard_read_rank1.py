"""mistake: rank 1 reads its first batch from a slow network filesystem (about 20 s, simulated with
sleep) while the job's process-group timeout was lowered to 10 s "to fail fast"; rank 0 times out
in DDP's first all-reduce although rank 1 was only slow.
label: MN3
alternates: D20
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/slow_shard_read_rank1.py
source: none known
written: session 11b, unseen
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def read_batch(rank, step):
    if rank == 1 and step == 0:
        time.sleep(20)
    return torch.randn(4, 8)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    rank = dist.get_rank()
    model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        loss = model(read_batch(rank, step)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
