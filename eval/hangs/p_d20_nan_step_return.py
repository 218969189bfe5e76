"""`train_step` returns early, before the gradient all_reduce, when the loss is not finite
("skip the bad batch"); one rank's shard holds a record whose log-feature is -inf.

Hang class: one rank's loss went non-finite once, so it issued one step's collectives fewer than
the others; at the end it waits in the final barrier while they wait in the last gradient
all_reduce.
Label: D20
Odd ranks: 1
Launch: python 3
Held out: session 11

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). Features are
`log(count)`; rank 1's shard has one record with a count of 0 (a sensor dropout), so that batch's
loss is inf. `train_step` logs "non-finite loss, skipping" and returns None; the ranks' later
all_reduces pair off one step apart (the same sizes, so nothing fails) until rank 1 runs out of
steps one early and waits in the barrier before the checkpoint.
"""

import math
import os
import tempfile

import torch
import torch.distributed as dist
from torch import nn


def shard(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(rank)
    counts = torch.randint(1, 50, (400, 6), generator=g).float()
    if rank == 1:
        counts[213, 2] = 0.0
    return counts


def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch: torch.Tensor, world: int) -> float | None:
    x = torch.log(batch)
    loss = (model(x) - x.mean(dim=1, keepdim=True)).pow(2).mean()
    if not math.isfinite(loss.item()):
        print("non-finite loss, skipping the batch", flush=True)
        return None
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    opt.step()
    opt.zero_grad()
    return loss.item()


def main() -> None:
    dist.init_process_group(
        "gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"])
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    model = nn.Linear(6, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = shard(rank)
    for epoch in range(3):
        for start in range(0, len(data), 8):
            train_step(model, opt, data[start : start + 8], world)
    dist.barrier()  # everyone done before rank 0 writes the checkpoint
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "final.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
