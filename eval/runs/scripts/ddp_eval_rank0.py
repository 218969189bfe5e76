"""mistake: validation runs only on rank 0 through the DDP-wrapped model (which has BatchNorm
buffers to broadcast), then every rank meets at a barrier.
label: D21
first_rank: none
launch: torchrun --nproc-per-node 2 eval/runs/scripts/ddp_eval_rank0.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=15))
    rank = dist.get_rank()
    model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        for _ in range(3):
            loss = model(torch.randn(8, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            model.eval()
            with torch.no_grad():
                val = sum(model(torch.randn(8, 8)).pow(2).mean().item() for _ in range(5))
            print(f"epoch {epoch} val {val:.3f}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
