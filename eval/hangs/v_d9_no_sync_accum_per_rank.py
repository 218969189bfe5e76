"""Gradient accumulation under DDP's `no_sync()`: the micro-batch size is picked per rank from the
longest sequence in that rank's shard (to fit a token budget), and the accumulation count from
the global batch size, `GLOBAL_BATCH // (micro * world)`. Every rank walks the same number of
micro-batches per epoch, but syncs (and steps) once per `accum` of them.

Hang class: ranks run different numbers of synchronised steps per epoch; the rank with the larger
accumulation count reaches the end-of-epoch barrier first.
Label: D9
Odd ranks: 0
Launch: torchrun 3
Held out: session 12b

Rank 0's shard has the longest sequences: micro-batch 4, accumulation 8, so it syncs fewer times
and waits in the barrier after the epoch; ranks 1 and 2 (accumulation 4) wait in DDP's gradient
all-reduce inside `backward()`.
"""

import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

TOKEN_BUDGET = 2048
GLOBAL_BATCH = 96
MICRO_STEPS = 96


def shard_lengths(rank: int) -> list[int]:
    longest = 512 if rank == 0 else 256
    return [longest - (i % 64) for i in range(1000)]


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    micro = TOKEN_BUDGET // max(shard_lengths(rank))
    accum = GLOBAL_BATCH // (micro * world)
    for epoch in range(3):
        for i in range(MICRO_STEPS):
            x = torch.randn(micro, 32)
            last = (i + 1) % accum == 0
            ctx = contextlib.nullcontext() if last else model.no_sync()
            with ctx:
                loss = model(x).pow(2).mean() / accum
                loss.backward()
            if last:
                opt.step()
                opt.zero_grad()
        dist.barrier()
        if rank == 0:
            print(f"epoch {epoch} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
