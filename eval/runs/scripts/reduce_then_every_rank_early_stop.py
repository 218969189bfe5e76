"""mistake: the validation loss is summed with `dist.reduce(total, dst=0)` and then every rank
divides it by the world size and runs the early-stopping check; only rank 0 holds the sum, so
rank 1 sees a much smaller "improvement", stops after its patience and leaves the training loop
while rank 0 goes on into the next epoch's DDP all-reduce.
label: D9
alternates: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/reduce_then_every_rank_early_stop.py
source: https://discuss.pytorch.org/t/early-stopping-in-ddp/104064
written: session 12b, unseen
"""

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    torch.manual_seed(100 + rank)  # each rank's own data
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    best, patience, bad = float("inf"), 2, 0
    for epoch in range(20):
        for _ in range(4):
            x = torch.randn(8, 4)
            loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            x = torch.randn(8, 4)
            total = (model(x) - x.sum(1, keepdim=True)).pow(2).mean().detach()
        dist.reduce(total, dst=0)
        val = total.item() / world
        if val < best - 0.3:
            best, bad = val, 0
        else:
            bad += 1
        print(f"rank {rank} epoch {epoch} val {val:.3f} best {best:.3f} bad {bad}")
        if bad > patience:
            print(f"rank {rank}: early stopping")
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
