"""mistake: one sample in rank 2's shard has the wrong number of features; rank 2 raises in
forward at step 3 while ranks 0, 1 and 3 wait for its gradients.
label: D20
first_rank: 2
launch: torchrun --nproc-per-node 4 eval/runs/scripts/bad_sample_rank2.py
source: none known
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def batch_for(rank, step):
    width = 19 if (rank == 2 and step == 3) else 20
    return torch.randn(8, width), torch.randn(8, 1)


def main():
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
    rank = dist.get_rank()
    model = DDP(torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.GELU(), torch.nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(6):
        x, y = batch_for(rank, step)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step}: loss={loss.item():.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
