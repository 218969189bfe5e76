"""A `while not converged` loop whose stopping test reads each rank's own loss.

Hang class: a rank leaves the training loop on a rank-local decision, the other trains on.
Label: D19
Odd ranks: 1
Launch: mp.spawn 2
Held out: session 9

Fitting a linear model until the loss is below a tolerance. The loss tested is the rank's local
one, never reduced: rank 1's shard is noise-free and reaches the tolerance after a few hundred
steps, rank 0's is noisy and never does. Rank 1 leaves the loop and waits in the barrier before
saving; rank 0 waits in DDP's gradient all-reduce.
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(rank: int, world: int, tol: float) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = os.environ.get("HANG_MASTER_PORT", "29500")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(rank)
    w_true = torch.arange(8.0).unsqueeze(1) / 8
    noise = 1.0 if rank == 0 else 0.0
    model = DDP(nn.Linear(8, 1, bias=False))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    converged, step = False, 0
    while not converged:
        x = torch.randn(64, 8, generator=g)
        y = x @ w_true + noise * torch.randn(64, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        converged = loss.item() < tol
    print(f"rank {rank} converged at step {step}", flush=True)
    dist.barrier()
    if rank == 0:
        torch.save(model.module.state_dict(), os.devnull)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2, 0.01), nprocs=2)
