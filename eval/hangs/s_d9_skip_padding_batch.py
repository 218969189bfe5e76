"""Batches whose labels are all padding are skipped with `continue` before the forward; the loss is
sent to rank 0 with `dist.reduce` for logging every 100 optimizer steps, and every rank meets in a
`dist.barrier()` before tearing the group down.

Hang class: a rank-local skip leaves one rank with one batch fewer; DDP's gradient all-reduces
(and the logging reduce) pair up silently across the shifted steps until the end, where that
rank waits in the final barrier and the others in their last batch's all-reduce.
Label: D9
Odd ranks: 1
Launch: torchrun 3
Held out: session 11d

Rank 1's shard has one batch whose labels are all -100 (batch 40): it runs 399 steps, ranks 0 and
2 run 400.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def shard(rank: int, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(rank)
    out = []
    for i in range(n):
        x = torch.randn(8, 6, generator=gen)
        y = torch.randint(0, 3, (8,), generator=gen)
        if rank == 1 and i == 40:
            y[:] = -100
        out.append((x, y))
    return out


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(nn.Linear(6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    global_step = 0
    for x, y in shard(rank, 400):
        if (y == -100).all():
            continue
        loss = nn.functional.cross_entropy(model(x), y, ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        global_step += 1
        if global_step % 100 == 0:
            avg = loss.detach().clone()
            dist.reduce(avg, dst=0)
            if rank == 0:
                print(f"step {global_step} loss {avg.item() / dist.get_world_size():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
