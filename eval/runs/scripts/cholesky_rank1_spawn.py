"""mistake: a Gaussian-process head computes `torch.linalg.cholesky` of the batch kernel matrix
without a jitter term; rank 1's batch holds two identical samples, the matrix is singular and
rank 1 raises, while rank 0 waits in DDP's gradient all-reduce (mp.spawn).
label: D20
first_rank: 1
launch: python eval/runs/scripts/cholesky_rank1_spawn.py
source: none known
written: session 12b, unseen
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class GPHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(3, 3)

    def forward(self, x, y):
        z = self.proj(x)
        k = z @ z.T
        chol = torch.linalg.cholesky(k)
        alpha = torch.cholesky_solve(y.unsqueeze(1), chol)
        return (y.unsqueeze(1) * alpha).sum()


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "localhost")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(rank)
    model = DDP(GPHead())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(3):
        x = torch.randn(3, 3)
        if rank == 1 and step == 1:
            x[1] = x[0]
        loss = model(x, torch.randn(3))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
