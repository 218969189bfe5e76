"""mistake: the training loop stops on a wall-clock budget (`if time.time() - start > budget:
break`) checked by each rank on its own clock; rank 0 also writes a progress log each step and
runs slower, so it stops a few steps before rank 1, whose next DDP all-reduce has no partner.
label: D9
alternates: D19
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/time_budget_stop_per_rank.py
source: none known
written: session 12c, unseen
"""

import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUDGET_S = 2.0


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = time.time()
    step = 0
    while True:
        if time.time() - start > BUDGET_S:
            break
        x = torch.randn(8, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            with open("/tmp/r12c_progress.log", "a") as f:
                f.write(f"step {step} loss {loss.item():.4f}\n")
            time.sleep(0.2)
        step += 1
    print(f"rank {rank} stopped after {step} steps", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
