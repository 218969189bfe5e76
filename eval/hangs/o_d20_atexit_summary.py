"""Final metrics are reported from an `atexit` hook that syncs the ranks; one rank dies on a bad record.

Hang class: a rank that crashed (its traceback printed) but whose exit runs a collective from an
`atexit` handler, so its process stays alive and the others wait in training for it.
Label: D20
Odd ranks: 2
Launch: python 3
Held out: session 10b

One `python` per rank from a shell loop (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The run
summary ("so it is written even if training stops early") is registered with `atexit`: it waits
at a barrier for every rank, then sums the counters. Rank 2's shard holds a label out of range at
step 6: `cross_entropy` raises, the traceback is printed, and the interpreter runs the exit hook,
which waits in `dist.barrier()`; ranks 0 and 1 wait in the gradient all_reduce of step 6.
"""

import atexit
import os

import torch
import torch.distributed as dist
from torch import nn

NUM_CLASSES = 5


class RunSummary:
    def __init__(self) -> None:
        self.seen = 0
        self.loss_sum = 0.0

    def add(self, n: int, loss: float) -> None:
        self.seen += n
        self.loss_sum += loss * n

    def report(self) -> None:
        dist.barrier()  # every rank has stopped before the totals are summed
        totals = torch.tensor([float(self.seen), self.loss_sum])
        dist.all_reduce(totals)
        if dist.get_rank() == 0:
            print(f"samples {int(totals[0])} mean loss {totals[1] / max(totals[0], 1):.4f}")


def load_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x = torch.randn(16, 12, generator=g)
    y = torch.randint(0, NUM_CLASSES, (16,), generator=g)
    if rank == 2 and step == 6:
        y[3] = NUM_CLASSES  # a record labelled with a class the config does not know
    return x, y


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    summary = RunSummary()
    atexit.register(summary.report)
    model = nn.Sequential(nn.Linear(12, 32), nn.Tanh(), nn.Linear(32, NUM_CLASSES))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(200):
        x, y = load_batch(rank, step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        opt.zero_grad()
        summary.add(len(y), float(loss))


if __name__ == "__main__":
    main()
