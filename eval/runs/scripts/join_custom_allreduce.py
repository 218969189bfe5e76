"""mistake: the ranks have different numbers of batches (rank 0 holds 5, rank 1 holds 3), and the
author wrapped the loop in DDP's `with model.join():` to handle uneven inputs; but each step also
all-reduces the loss for logging with a plain `dist.all_reduce`, which Join does not shadow, so
once rank 1 has run out and joined, its shadow all-reduce of the gradients meets rank 0's logging
all-reduce (init timeout 15 s).
label: D9
alternates: D22
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/join_custom_allreduce.py
source: https://github.com/pytorch/pytorch/issues/38174
written: session 11, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n_batches = 5 if rank == 0 else 3
    batches = [(torch.randn(8, 16), torch.randn(8, 1)) for _ in range(n_batches)]
    with model.join():
        for step, (x, y) in enumerate(batches):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            avg = loss.detach().clone()
            dist.all_reduce(avg)
            if rank == 0:
                print(f"step {step} loss {avg.item() / dist.get_world_size():.4f}", flush=True)
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
