"""The progress bar exists on rank 0 only; its postfix shows the loss averaged over ranks, and
the averaging (`dist.all_reduce`) sits inside the `set_postfix` call.

Hang class: a collective reached only inside `if rank == 0:` (the progress-bar update).
Label: D21
Odd ranks: 0
Launch: mp.spawn 2
Held out: session 11e

Each rank trains its own model on its shard (ensemble members); at the end of the epoch rank 0
calls `all_reduce` for the postfix, rank 1 (no bar) waits in the `dist.barrier()` before saving.
(With DDP under gloo the unmatched scalar `all_reduce` against a gradient bucket aborts instead.)
"""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from tqdm import tqdm


def mean_over_ranks(value: torch.Tensor) -> float:
    value = value.detach().clone()
    dist.all_reduce(value)
    return value.item() / dist.get_world_size()


def train(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ.setdefault("MASTER_PORT", "29547")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = range(200)
    pbar = tqdm(steps, disable=True) if rank == 0 else None
    for step in steps:
        x = torch.randn(32, 16)
        loss = nn.functional.mse_loss(model(x), x.mean(-1, keepdim=True))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if pbar is not None:
            pbar.update(1)
            if step == len(steps) - 1:
                pbar.set_postfix(loss=f"{mean_over_ranks(loss):.4f}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2, join=True)
