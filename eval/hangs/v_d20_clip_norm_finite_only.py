"""Hand-written data parallelism with global-norm gradient clipping: each rank computes its local
squared gradient norm and joins the all_reduce of the norm only when that norm is finite ("don't
poison the other ranks with a NaN"); a rank with a non-finite norm skips the step. Inputs are
standardised with statistics from each rank's own shard.

Hang class: one rank went NaN and skips the collective its step would have joined; it runs its
loop out and waits at the end while the others wait in the norm's all_reduce.
Label: D20
Odd ranks: 1
Launch: python 2
Held out: session 12b

A feature is constant in rank 1's shard, so its standard deviation is 0 and every input there is
NaN: rank 1 skips every step and waits in the closing barrier; rank 0 waits in the all_reduce of
the squared norm in `clip_global_norm` on its first step.
"""

import math
import os

import torch
import torch.distributed as dist
from torch import nn

MAX_NORM = 1.0


def load_shard(rank: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(512, 12, generator=gen)
    if rank == 1:
        x[:, 5] = 3.0  # this shard came from a single sensor: the column never varies
    return x


def clip_global_norm(params: list[nn.Parameter]) -> bool:
    local_sq = sum(p.grad.pow(2).sum() for p in params)
    if not torch.isfinite(local_sq):
        return False
    dist.all_reduce(local_sq)
    total = math.sqrt(float(local_sq))
    if total > MAX_NORM:
        for p in params:
            p.grad.mul_(MAX_NORM / total)
    return True


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.Linear(32, 1))
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-2)
    data = load_shard(rank)
    data = (data - data.mean(0)) / data.std(0)
    skipped = 0
    for epoch in range(3):
        for batch in data.split(32):
            loss = model(batch).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if not clip_global_norm(params):
                skipped += 1
                continue
            for p in params:
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
    dist.barrier()
    print(f"rank {rank}: skipped {skipped} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
