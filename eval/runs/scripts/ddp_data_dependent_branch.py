"""mistake: the model skips its refinement block when the batch is "easy" (a data-dependent early
exit, `if x.abs().mean() < thresh`), under DDP with the default settings; on one rank's batch the
branch is taken, that rank's refinement block gets no gradient, and the next step fails.
label: D8
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_data_dependent_branch.py
source: none known
written: session 9, unseen
"""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn


class EarlyExitNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(12, 12)
        self.refine = nn.Sequential(nn.Linear(12, 12), nn.ReLU())
        self.head = nn.Linear(12, 2)

    def forward(self, x, thresh=0.9):
        h = self.stem(x)
        if h.abs().mean() >= thresh:
            h = self.refine(h)
        return self.head(h)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = nn.parallel.DistributedDataParallel(EarlyExitNet())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(4):
        scale = 0.01 if rank == 0 else 10.0
        x = torch.randn(16, 12) * scale
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
